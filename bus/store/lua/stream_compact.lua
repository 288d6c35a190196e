-- stream_compact.lua: rewrite a short stream whose node holds far more memory than its
-- entries need (Redis 7 allocates each new stream node at stream-node-max-bytes, 4096 by
-- default, however short the entry: a one-message thread log or a quiet session's events
-- take a whole node). DUMP + RESTORE REPLACE rebuilds the same stream (entries, last id,
-- entries-added, groups, TTL) with nodes sized to their content; atomic in this script,
-- and a reader blocked on the key stays blocked and gets the next entry.
-- KEYS[1] stream   P:{sid}:events or P:{thr}:log (any stream: one key, its own slot)
-- ARGV[1] most entries a stream may hold to be compacted (DUMP costs its size)
-- ARGV[2] slack bytes, ARGV[3] bytes a node: compact only when MEMORY USAGE exceeds the
-- entries' own bytes by more than slack + bytes a node x nodes (a compact stream stays
-- under that bound, so it is never redone).
-- ARGV[4] settled ms: a stream whose newest entry is younger than that (the server's clock,
-- the one its ids come from) is left for a later pass: it is still being written, and
-- compacted now it would take a fresh node at the next entry and be redone.
-- Returns the bytes saved by MEMORY USAGE (0: left as it was).
local n = redis.call('XLEN', KEYS[1])
if n == 0 or n > tonumber(ARGV[1]) then
  return 0
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local now = redis.call('TIME')
local settled = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[4])
local ms = last[1] and tonumber(string.match(last[1][1], '^(%d+)'))
if ms == nil or ms > settled then
  return 0
end
local used = redis.call('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', 0)
local bytes = 0
for _, row in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  bytes = bytes + 24
  for _, v in ipairs(row[2]) do
    bytes = bytes + #v + 2
  end
end
local nodes = 1
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'radix-tree-keys' then
    nodes = info[i + 1]
  end
end
if used <= bytes + tonumber(ARGV[2]) + tonumber(ARGV[3]) * nodes then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  ttl = 0
end
local payload = redis.call('DUMP', KEYS[1])
redis.call('RESTORE', KEYS[1], ttl, payload, 'REPLACE')
return used - redis.call('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', 0)
