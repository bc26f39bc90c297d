"""Text tool protocols for upstreams without native tool calling.

``invoke`` and ``bracket`` render the tool instruction and replay history as
text; ``parser`` turns the model's text back into events. Sans-IO, unified
model only.
"""
