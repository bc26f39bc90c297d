"""The reasoning store's Lua scripts on Redis (``addon.stores.redis_backend``), by name: each
runs atomically across workers. The keys' layout they keep is below."""

from __future__ import annotations

PREFIX = "cursor-bridge:"
"""Every key the bridge writes starts with this (one Redis db may hold other things too)."""

# Layout under ``PREFIX`` (db from the URL): ``r:<key>`` the value (``PX`` = the TTL, renewed
# on every use: Redis's own expiry is the sliding TTL); ``lru`` a sorted set of keys by last
# use and ``sizes`` / ``bytes`` their sizes and their sum, kept by the Lua scripts below (atomic
# across workers) that enforce ``max_entries`` (least recently used first) and ``max_bytes``;
# ``secret`` the store's secret (``SET NX``: the first worker makes it, the others read it);
# ``cool:<route>`` a fallback cooldown (``PX`` = its length); ``calib:<route and model>`` a list
# of the calibrated estimate's last ratios (``RATIOS_TTL`` after its last lesson). In full:
# docs/reasoning.md#the-redis-backend.

# KEYS: value, lru. ARGV: key, now, ttl in ms (0: none). Reading renews the TTL and the use.
_GET = """
local v
if tonumber(ARGV[3]) > 0 then
  v = redis.call('GETEX', KEYS[1], 'PX', ARGV[3])
else
  v = redis.call('GET', KEYS[1])
end
if v then
  redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
end
return v
"""

# KEYS: the values, then lru. ARGV: now, ttl in ms, then the keys. As _GET for each key, in one
# command: one round trip, and redis-py packs one command, not one per key.
_GET_MANY = """
local lru, now, ttl = KEYS[#KEYS], ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS - 1 do
  local v
  if ttl > 0 then
    v = redis.call('GETEX', KEYS[i], 'PX', ARGV[2])
  else
    v = redis.call('GET', KEYS[i])
  end
  if v then
    redis.call('ZADD', lru, 'XX', now, ARGV[i + 2])
  end
  out[i] = v or false
end
return out
"""

# Shared by the scripts that drop entries. KEYS[1..3]: lru, sizes, bytes.
_DROP = f"""
local function drop(member)
  redis.call('DEL', '{PREFIX}r:' .. member)
  redis.call('ZREM', KEYS[1], member)
  local size = redis.call('HGET', KEYS[2], member)
  if size then
    redis.call('HDEL', KEYS[2], member)
    redis.call('DECRBY', KEYS[3], size)
  end
end
"""

# ARGV (from ARGV[base]): cutoff ('' : no TTL), max_entries, max_bytes, batch.
_EVICT = """
local function evict(base)
  local cutoff, most, most_bytes = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  if cutoff ~= '' then
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, ARGV[base + 3])) do
      drop(m)
    end
  end
  while true do
    local n = redis.call('ZCARD', KEYS[1])
    local b = tonumber(redis.call('GET', KEYS[3]) or '0')
    if n <= most and b <= most_bytes then return end
    if n == 0 then
      redis.call('SET', KEYS[3], 0)
      return
    end
    local k = 1
    if n > most then k = math.min(n - most, 512) end
    for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, k - 1)) do
      drop(m)
    end
  end
end
"""

# KEYS: lru, sizes, bytes, value. ARGV: key, text, size, now, ttl ms, then evict's.
_PUT = (
    _DROP
    + _EVICT
    + """
if tonumber(ARGV[5]) > 0 then
  redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[4], ARGV[2])
end
local old = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('INCRBY', KEYS[3], tonumber(ARGV[3]) - (tonumber(old) or 0))
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
evict(6)
"""
)

# KEYS: lru, sizes, bytes. ARGV: evict's.
_EVICT_ONLY = _DROP + _EVICT + "evict(1)\n"

# KEYS: lru, sizes, bytes. ARGV: key.
_DELETE = _DROP + "drop(ARGV[1])\n"

# KEYS: cooldown. ARGV: ms. A later end already set is kept.
_COOL = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
"""

SCRIPTS: dict[str, str] = {
    "get": _GET,
    "get_many": _GET_MANY,
    "put": _PUT,
    "evict": _EVICT_ONLY,
    "delete": _DELETE,
    "cool": _COOL,
}
"""The scripts by the name the backend calls them (``EVALSHA`` of each, loaded on first use)."""
