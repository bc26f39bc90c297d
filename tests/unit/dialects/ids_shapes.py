"""The shapes of the ids the bridge mints for an answer the upstream named none for (or one
from another dialect): Anthropic's, OpenAI Responses' and chat's own formats."""

from __future__ import annotations

import re

MESSAGE_ID = re.compile(r"msg_01[0-9A-Za-z]{22}")
RESPONSE_ID = re.compile(r"resp_[0-9a-f]{48}")
COMPLETION_ID = re.compile(r"chatcmpl-[0-9A-Za-z]{29}")
