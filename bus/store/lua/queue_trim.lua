-- queue_trim.lua: once the delivery has taken every entry of a session's queue, drop the
-- queue and its cursor, so an idle session keeps neither (an empty stream and a cursor
-- still cost memory; a node of entries is stream-node-max-bytes).
-- All keys are in the session's slot {<sid>}.
-- KEYS[1] stream   P:{sid}:stream   the session's queue
-- KEYS[2] cursor   P:{sid}:cursor   the last stream id the delivery has taken
-- No ARGV. Returns the queue's length after the call.
-- Entries above the cursor (not yet taken) are never touched: when the newest entry is
-- not the cursor's, nothing is removed here. The next XADD makes the queue again, and
-- with no cursor the delivery reads it from the start (0-0): every entry in it is new.
-- Both go only once the server's clock is past the cursor's millisecond: every later
-- entry then gets an id above the cursor, so a delivery still reading after the cursor
-- it holds (this one, or a pass run beside it) misses none. Until then (the same ms),
-- the entries are dropped and the stream kept, with its last id, as before.
local len = redis.call('XLEN', KEYS[1])
local cursor = redis.call('GET', KEYS[2])
if not cursor then
  return len
end
if len > 0 then
  local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if last[1] == nil or last[1][1] ~= cursor then
    return len
  end
elseif redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local cursor_ms = tonumber(string.match(cursor, '^(%d+)'))
if cursor_ms ~= nil and cursor_ms < now_ms then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 0
end
if len == 0 then
  return 0
end
-- MINID keeps ids >= the cursor (everything older goes), then the cursor's own entry:
-- a node whose entries are all gone is freed.
redis.call('XTRIM', KEYS[1], 'MINID', cursor)
redis.call('XDEL', KEYS[1], cursor)
return redis.call('XLEN', KEYS[1])
