-- sweep_quiet.lua: whether the backlog sweep must read a session (bus.delivery.scheduler),
-- decided on the server: most sessions are quiet and cost one small reply, not eight.
-- All keys are in the session's slot {sid}.
-- KEYS[1] session  P:{sid}:session  the session hash (its wake_pending field)
-- KEYS[2] cursor   P:{sid}:cursor   the last stream id a delivery took
-- KEYS[3] stream   P:{sid}:stream   its queue
-- KEYS[4] notice   P:{sid}:notice   the notice in flight (its "at" field)
-- KEYS[5] new      P:{sid}:new      its messages not yet noticed
-- KEYS[6] floor    P:{sid}:floor    the floor's unconfirmed notice records
-- Returns 0 when the session is quiet (or gone): no queue entry past its cursor, nothing
-- in flight, no new messages, no floor records, no wake pending; else 1 (read it).
-- The checks run quiet-first: a quiet answer is 0 whether or not the session is there, so
-- the session's existence is read only when something says "read it".
local function busy()
  local pending = redis.call('HGET', KEYS[1], 'wake_pending')
  if pending and pending ~= '' then
    return 1  -- a field of the session: it is there
  end
  -- A notice in flight (its hash is written whole, "at" with it: parts/notice_take.lua),
  -- new messages, floor records: any of the three keys there (Redis drops an emptied hash
  -- or set).
  if redis.call('EXISTS', KEYS[4], KEYS[5], KEYS[6]) > 0 then
    return redis.call('EXISTS', KEYS[1])
  end
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  if last[1] == nil then
    return 0
  end
  local cursor = redis.call('GET', KEYS[2])
  if not cursor then
    return redis.call('EXISTS', KEYS[1])
  end
  local a, b = string.match(last[1][1], '^(%d+)-(%d+)$')
  local c, d = string.match(cursor, '^(%d+)-?(%d*)$')
  if not a or not c then
    return redis.call('EXISTS', KEYS[1])
  end
  a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d) or 0
  if a > c or (a == c and b > d) then
    return redis.call('EXISTS', KEYS[1])
  end
  return 0
end
return busy()
