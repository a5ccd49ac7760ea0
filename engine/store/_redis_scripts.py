"""The Lua scripts of the Redis store: each makes one operation atomic on the server.

Scripts are sent by digest (EVALSHA); the store loads one when the server answers
NOSCRIPT (a new server, a restart, SCRIPT FLUSH).
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = [
    "COMMIT",
    "HEAD",
    "LEASE",
    "MESSAGES",
    "POST_MESSAGE",
    "READ",
    "SCRIPT_SHA",
    "TAKE_MESSAGES",
    "ms",
]

# KEYS: lease, token. ARGV: op (acquire | takeover | renew | release), token, ttl ms,
# owner, and for takeover the lease value seen (a holder the client found dead).
# Returns {token (0: refused or released), lease value of another holder, its pttl,
# server time sec, usec}. A lease key that expired is still ours while the counter
# shows our token (nobody took over); releasing burns the token so renew cannot revive it.
# A takeover replaces a live lease only while it is exactly the value seen.
LEASE: Final = """
local lease = redis.call('GET', KEYS[1])
local now = redis.call('TIME')
if ARGV[1] == 'acquire' or ARGV[1] == 'takeover' then
  if lease and (ARGV[1] == 'acquire' or lease ~= ARGV[5]) then
    return {0, lease, redis.call('PTTL', KEYS[1]), now[1], now[2]}
  end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    -- seed a new counter from the server clock (ms) so a run whose keys expired by
    -- retention never hands out a token it already issued
    redis.call('SET', KEYS[2], now[1] .. string.sub(string.format('%06d', now[2]), 1, 3))
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], token .. ':' .. ARGV[4], 'PX', ARGV[3])
  return {token, '', 0, now[1], now[2]}
end
-- a live lease always carries the counter's token, so the counter alone tells
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return {0, lease or '', 0, now[1], now[2]} end
if ARGV[1] == 'renew' then
  redis.call('SET', KEYS[1], ARGV[2] .. ':' .. ARGV[4], 'PX', ARGV[3])
  return {tonumber(ARGV[2]), '', 0, now[1], now[2]}
end
redis.call('DEL', KEYS[1])
redis.call('INCR', KEYS[2])
return {0, '', 0, now[1], now[2]}
"""

# KEYS: meta, and the index when the commit moves the run's index entry (only on one
# server: on a Redis Cluster the index is in another slot, and the store updates it with
# its own command). The run's other keys are named after meta (same prefix and hash tag).
# ARGV: lease value ("<token>:<owner>"), seq and updated_at packed as two little-endian
# doubles (16 bytes: the client packs them in one call, where formatting them as text
# costs it more than the rest of the command; the script writes seq as integer text and
# hands updated_at to HSET as a number, which Redis writes as exact decimal text, so the
# meta hash holds what it always held), record; then name/value pairs
# of what the store has not sent for this run before (its first commit, a new lease) or
# what changed since its last commit: 'graph', 'created_at', 'status' (meta fields),
# 'listed' (the index score), 'snapshot', 'expire' ('0' persist, else the expiry in ms)
# and 'ttl' (the lease ttl in ms, to set a lease key that expired). A step that changes
# nothing but the head sends three arguments: each argument and each call costs the
# script more than the command's own work.
# Returns 1 written, {2} already written (a retry), {-1, lease} lost, {-2, head}, {-3,
# head, last stored seq} when the records do not end at the head (changed outside), or
# {-4} when the lease key expired and no 'ttl' came (the store sends it all again).
# Fencing: the lease key holds "<token>:<owner>" of the holder whose token the counter
# shows (every script that moves the counter replaces or deletes it), so while it holds
# our value nobody took the run. If it holds another value, or none, the counter tells:
# while it shows our token the lease key expired meanwhile, is set again (the lease is
# taken again) and the commit goes ahead. The records' length is checked by the push
# itself (undone if it does not land at seq).
COMMIT: Final = """
local call = redis.call
local base = string.sub(KEYS[1], 1, -5)
local lease = base .. 'lease'
local held = call('GET', lease)
if held ~= ARGV[1] then
  if call('GET', base .. 'token') ~= string.match(ARGV[1], '^(%d+):') then
    return {-1, held or ''}
  end
  if not held then
    local ttl
    for i = 4, #ARGV, 2 do
      if ARGV[i] == 'ttl' then ttl = ARGV[i + 1] end
    end
    if not ttl then return {-4} end
    call('SET', lease, ARGV[1], 'PX', ttl)
  end
end
local seq, at = struct.unpack('<dd', ARGV[2])
local step = string.format('%d', seq)
local rec = base .. 'rec'
local head = tonumber(call('HGET', KEYS[1], 'seq') or '-1')
if head + 1 ~= seq then
  if seq <= head and call('LINDEX', rec, seq) == ARGV[3] then return {2} end
  return {-2, head}
end
if #ARGV % 2 == 0 then return redis.error_reply('ERR commit arguments come in pairs') end
local stored = call('RPUSH', rec, ARGV[3])
if stored ~= seq + 1 then
  call('RPOP', rec)
  return {-3, head, stored - 2}
end
if #ARGV == 3 then
  call('HSET', KEYS[1], 'seq', step, 'updated_at', at)
  return 1
end
local fields, expire = {'seq', step, 'updated_at', at}, nil
for i = 4, #ARGV, 2 do
  local name, value = ARGV[i], ARGV[i + 1]
  if name == 'graph' or name == 'created_at' or name == 'status' then
    fields[#fields + 1] = name
    fields[#fields + 1] = value
  elseif name == 'snapshot' then
    call('HSET', base .. 'snap', step, value)
    call('ZADD', base .. 'snaps', seq, step)
  elseif name == 'listed' then
    call('ZADD', KEYS[2], value, string.sub(KEYS[1], #KEYS[2] - 2, -7))
  elseif name == 'expire' then
    expire = value
  end
end
call('HSET', KEYS[1], unpack(fields))
if expire then
  for _, key in ipairs({KEYS[1], rec, base .. 'snap', base .. 'snaps', base .. 'token',
      base .. 'msgid', base .. 'msg', base .. 'msgtaken'}) do
    if expire == '0' then call('PERSIST', key) else call('PEXPIRE', key, expire) end
  end
end
return 1
"""

# KEYS: meta, rec, snap, snaps. ARGV: seq or ''. Returns {-1} no run, {-2, head} no
# such seq, {-3} no snapshot, {-4, stored head} a head that is not a number, {-5, head,
# records stored} records that do not end at the head, or {1, graph, status, head,
# created, updated, seq, snapshot_seq, snapshot, records...}.
READ: Final = """
local m = redis.call('HMGET', KEYS[1], 'graph', 'status', 'seq', 'created_at', 'updated_at')
if not m[3] then return {-1} end
local head = tonumber(m[3])
if not head then return {-4, m[3]} end
local stored = redis.call('LLEN', KEYS[2])
if stored ~= head + 1 then return {-5, head, stored} end
local seq = tonumber(ARGV[1]) or head
if seq < 0 or seq > head then return {-2, head} end
local s = redis.call('ZREVRANGEBYSCORE', KEYS[4], seq, '-inf', 'LIMIT', 0, 1)[1]
if not s then return {-3} end
local out = {1, m[1], m[2], head, m[4], m[5], seq, tonumber(s), redis.call('HGET', KEYS[3], s)}
if tonumber(s) < seq then
  local records = redis.call('LRANGE', KEYS[2], tonumber(s) + 1, seq)
  for i = 1, #records do out[#out + 1] = records[i] end
end
return out
"""

# KEYS: meta, rec. Returns {-1} no run, or {1, stored head, records stored}: where a
# history read starts, both at one instant (a commit between two plain commands would
# look like records past the head).
HEAD: Final = """
local head = redis.call('HGET', KEYS[1], 'seq')
if not head then return {-1} end
return {1, head, redis.call('LLEN', KEYS[2])}
"""

# A run's inbox. KEYS: ids (hash: message id -> position), msgs (hash: position -> body,
# position:id -> id, position:at -> time), taken (the cursor). ARGV: id, body, at.
# Returns {1 (taken in) or 0 (kept already), position, body, at}.
POST_MESSAGE: Final = """
local kept = redis.call('HGET', KEYS[1], ARGV[1])
if kept then
  local m = redis.call('HMGET', KEYS[2], kept, kept .. ':at')
  return {0, tonumber(kept), m[1], m[2]}
end
local position = redis.call('HLEN', KEYS[1]) + 1
redis.call('HSET', KEYS[1], ARGV[1], position)
redis.call('HSET', KEYS[2], position, ARGV[2], position .. ':id', ARGV[1],
  position .. ':at', ARGV[3])
return {1, position, ARGV[2], ARGV[3]}
"""

# KEYS: ids, msgs, taken. ARGV: after ('' : the cursor), limit. Returns a flat list of
# position, id, body, at for each message past ``after``, in order.
MESSAGES: Final = """
local after = tonumber(ARGV[1]) or tonumber(redis.call('GET', KEYS[3]) or '0')
local last = math.min(redis.call('HLEN', KEYS[1]), after + tonumber(ARGV[2]))
local out = {}
for position = after + 1, last do
  local m = redis.call('HMGET', KEYS[2], position .. ':id', position, position .. ':at')
  out[#out + 1] = position
  out[#out + 1] = m[1]
  out[#out + 1] = m[2]
  out[#out + 1] = m[3]
end
return out
"""

# KEYS: ids, taken. ARGV: position. The cursor only moves on, never past the last message.
TAKE_MESSAGES: Final = """
local position = math.min(tonumber(ARGV[1]), redis.call('HLEN', KEYS[1]))
if position > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], position)
end
return 1
"""

SCRIPT_SHA: Final = {
    script: hashlib.sha1(script.encode()).hexdigest()
    for script in (LEASE, COMMIT, READ, HEAD, POST_MESSAGE, MESSAGES, TAKE_MESSAGES)
}
"""Each script's SHA-1 digest, the name EVALSHA knows it by."""


def ms(seconds: float) -> int:
    """Seconds as the whole milliseconds the scripts take (at least 1)."""
    return max(1, round(seconds * 1000))
