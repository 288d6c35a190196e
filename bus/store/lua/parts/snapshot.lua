-- parts/snapshot.lua: a delivery's fence and the plan's reads (included by
-- delivery_snapshot.lua and delivery_begin.lua). All keys in the session's slot {<sid>}.
-- snapshot(k, token, ttl, advance_to, read_after, count), k: lock, session, notice, floor,
-- new, wakeq, stream, cursor, rawflight, again (as delivery_snapshot.lua's KEYS).
-- Returns the list delivery_snapshot.lua describes (its callers encode it).
local function snapshot(k, token, ttl, advance_to, read_after, count)
  if advance_to ~= '' then
    redis.call('SET', k[8], advance_to)
    redis.call('DEL', k[9])
  end
  local held = 0
  if redis.call('GET', k[1]) == token then
    held = redis.call('PEXPIRE', k[1], ttl)
    redis.call('PEXPIRE', k[10], ttl)
  end
  local session = redis.call('HGETALL', k[2])
  local nid = redis.call('HGET', k[3], 'id') or ''
  local floor = redis.call('HGETALL', k[4])
  local pending = redis.call('ZCARD', k[5])
  local wake = redis.call('ZRANGE', k[6], 0, 0, 'WITHSCORES')
  local first = redis.call('ZRANGE', k[5], 0, 0, 'WITHSCORES')
  local building = redis.call('EXISTS', k[3])
  local retry_at = redis.call('HGET', k[2], 'retry_at') or ''
  -- The queue emptied of what the cursor covers, as queue_trim.lua does.
  local len = redis.call('XLEN', k[7])
  if len > 0 then
    local cursor = redis.call('GET', k[8])
    if cursor then
      local last = redis.call('XREVRANGE', k[7], '+', '-', 'COUNT', 1)
      if last[1] ~= nil and last[1][1] == cursor then
        redis.call('XTRIM', k[7], 'MINID', cursor)
        redis.call('XDEL', k[7], cursor)
        len = redis.call('XLEN', k[7])
      end
    end
  end
  local rows = {}
  if read_after ~= '' then
    rows = redis.call('XRANGE', k[7], '(' .. read_after, '+', 'COUNT', count)
  end
  return {held, session, nid, floor, pending, wake[2] or '', first[2] or '', building,
    retry_at, len, rows}
end
