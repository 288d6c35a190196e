-- queue_trim.lua: once the delivery has taken every entry of a session's queue, drop them
-- all, so an idle session's queue holds no stream node (Redis 7 allocates each node at
-- stream-node-max-bytes: ~4.7 KB at the default 4096, however short the entry).
-- All keys are in the session's slot {<sid>}.
-- KEYS[1] stream   P:{sid}:stream   the session's queue
-- KEYS[2] cursor   P:{sid}:cursor   the last stream id the delivery has taken
-- No ARGV. Returns the queue's length after the call.
-- The stream itself stays (empty): its last id is kept, so the next XADD still gets an
-- id above the cursor. Entries above the cursor (not yet taken) are never touched: when
-- the newest entry is not the cursor's, nothing is removed here.
local len = redis.call('XLEN', KEYS[1])
if len == 0 then
  return 0
end
local cursor = redis.call('GET', KEYS[2])
if not cursor then
  return len
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if last[1] == nil or last[1][1] ~= cursor then
  return len
end
-- MINID keeps ids >= the cursor (everything older goes), then the cursor's own entry:
-- a node whose entries are all gone is freed.
redis.call('XTRIM', KEYS[1], 'MINID', cursor)
redis.call('XDEL', KEYS[1], cursor)
return redis.call('XLEN', KEYS[1])
