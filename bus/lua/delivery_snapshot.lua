-- delivery_snapshot.lua: a delivery's fence and the plan's reads in one call (bus.delivery,
-- bus.batch); the same steps, in the same order, as the pipeline it replaces.
-- All keys are in the session's slot {<sid>}.
-- KEYS[1] lock      P:{sid}:lock
-- KEYS[2] session   P:{sid}:session
-- KEYS[3] notice    P:{sid}:notice
-- KEYS[4] floor     P:{sid}:floor
-- KEYS[5] new       P:{sid}:new
-- KEYS[6] wakeq     P:{sid}:wakeq
-- KEYS[7] stream    P:{sid}:stream
-- KEYS[8] cursor    P:{sid}:cursor
-- KEYS[9] rawflight P:{sid}:rawflight
-- KEYS[10] again    P:{sid}:again (the hand-off flag: extended with the lease, extend_lock.lua)
-- ARGV[1] our lock token, ARGV[2] lock TTL ms
-- ARGV[3] advance_to: move the cursor there first (and drop the raw line in flight); '' not
-- ARGV[4] read_after: also read up to ARGV[5] entries after this stream id; '' not
-- Returns, JSON-encoded (one string: a batch's thousands of nested replies cost the
-- client's parser more than the encoding costs here; an empty list encodes as {}):
-- [held, session hash (flat), notice id or '', floor hash (flat), ZCARD new,
-- first wakeq score or '', first new score or '', notice exists, retry_at or '',
-- queue length after the trim (queue_trim.lua's rule), entries read].
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[8], ARGV[3])
  redis.call('DEL', KEYS[9])
end
local held = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  held = redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[10], ARGV[2])
end
local session = redis.call('HGETALL', KEYS[2])
local nid = redis.call('HGET', KEYS[3], 'id') or ''
local floor = redis.call('HGETALL', KEYS[4])
local pending = redis.call('ZCARD', KEYS[5])
local wake = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
local building = redis.call('EXISTS', KEYS[3])
local retry_at = redis.call('HGET', KEYS[2], 'retry_at') or ''
-- The queue emptied of what the cursor covers, as queue_trim.lua does.
local len = redis.call('XLEN', KEYS[7])
if len > 0 then
  local cursor = redis.call('GET', KEYS[8])
  if cursor then
    local last = redis.call('XREVRANGE', KEYS[7], '+', '-', 'COUNT', 1)
    if last[1] ~= nil and last[1][1] == cursor then
      redis.call('XTRIM', KEYS[7], 'MINID', cursor)
      redis.call('XDEL', KEYS[7], cursor)
      len = redis.call('XLEN', KEYS[7])
    end
  end
end
local rows = {}
if ARGV[4] ~= '' then
  rows = redis.call('XRANGE', KEYS[7], '(' .. ARGV[4], '+', 'COUNT', ARGV[5])
end
return cjson.encode({held, session, nid, floor, pending, wake[2] or '', first[2] or '', building,
  retry_at, len, rows})
