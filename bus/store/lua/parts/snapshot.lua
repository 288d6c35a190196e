-- parts/snapshot.lua: a delivery's fence and the plan's reads (included by
-- delivery_snapshot.lua and delivery_begin.lua). All keys in the session's slot {<sid>}.
-- snapshot(k, token, ttl, advance_to, read_after, count, take), k: lock, session, notice,
-- floor, new, wakeq, stream, cursor, rawflight, again, and with take events, msgs (as
-- delivery_snapshot.lua's KEYS). take: nil, or {notice id, now ms, '1' when a session
-- that names no agent_inbox has it on}: the notice is taken into flight here too
-- (parts/notice_take.lua) when the reads show the plan's "steer" (see steer_ready).
-- Returns the list delivery_snapshot.lua describes (its callers encode it).
--@include notice_take

-- A flat HGETALL reply as a table.
local function fields(flat)
  local f = {}
  for i = 1, #flat, 2 do
    f[flat[i]] = flat[i + 1]
  end
  return f
end

-- The steer rule, as bus.core.policy.steers writes it (a table-driven test runs both over
-- every row): a running session with its inbox on, no person's prompt waiting, no wake
-- command pending, no notice in flight, none unconfirmed on the floor, no retry still to
-- wait for. f: the session record; nid: the notice in flight or ''; floor: the floor's
-- records (flat); retry_at: the record's or ''; now: ms; inbox_default: '1' when a session
-- that names no agent_inbox has it on. (Something new is notice_take's own check.)
local function steer_ready(f, nid, floor, retry_at, now, inbox_default)
  local inbox = f['agent_inbox']
  if inbox == nil or inbox == '' then
    inbox = inbox_default
  end
  return f['state'] == 'running' and inbox == '1' and f['prompt_waiting'] ~= '1'
    and (f['wake_pending'] or '') == '' and nid == '' and #floor == 0
    and (retry_at == '' or tonumber(retry_at) <= tonumber(now))
end

local function snapshot(k, token, ttl, advance_to, read_after, count, take)
  -- One read of the lock and the cursor (the cursor just moved when advance_to is given).
  local got = redis.call('MGET', k[1], k[8])
  local cursor = got[2]
  if advance_to ~= '' then
    redis.call('SET', k[8], advance_to)
    redis.call('DEL', k[9])
    cursor = advance_to
  end
  local held = 0
  if got[1] == token then
    held = redis.call('PEXPIRE', k[1], ttl)
    redis.call('PEXPIRE', k[10], ttl)
  end
  local session = redis.call('HGETALL', k[2])
  -- The notice hash is written whole with its id (parts/notice_take.lua): it exists
  -- exactly when the id does.
  local nid = redis.call('HGET', k[3], 'id') or ''
  local building = 0
  if nid ~= '' then
    building = 1
  end
  local floor = redis.call('HGETALL', k[4])
  -- The first two of the new set and of the wake queue: with at most one there, the read
  -- is the whole set (counted only when longer).
  local head = redis.call('ZRANGE', k[5], 0, 1, 'WITHSCORES')
  local pending = #head / 2
  if pending > 1 then
    pending = redis.call('ZCARD', k[5])
  end
  local first = {head[1], head[2]}
  local wakes = redis.call('ZRANGE', k[6], 0, 1, 'WITHSCORES')
  local wake = {wakes[1], wakes[2]}
  local record = fields(session)  -- the session record just read, as a table
  local retry_at = record['retry_at'] or ''
  -- The queue emptied of what the cursor covers, as queue_trim.lua does: when its newest
  -- entry is the cursor's, every entry is at or below the cursor and all of them go (the
  -- stream itself stays, with its last id).
  local len = 0
  local last = redis.call('XREVRANGE', k[7], '+', '-', 'COUNT', 1)
  local newest = last[1] and last[1][1]  -- the queue's newest entry's id, nil when empty
  if newest then
    if cursor and newest == cursor then
      redis.call('XTRIM', k[7], 'MAXLEN', 0)
      newest = nil
    else
      len = redis.call('XLEN', k[7])
    end
  end
  -- Entries after read_after: none to read when the queue is empty or ends there.
  local rows = {}
  if read_after ~= '' and newest and newest ~= read_after then
    rows = redis.call('XRANGE', k[7], '(' .. read_after, '+', 'COUNT', count)
  end
  local taken = ''
  -- The lease held and nothing more to read: the delivery plans from these reads now
  -- (bus.delivery.engine), and gives a notice taken here back if its plan differs.
  if take and held ~= 0 and #rows == 0
      and steer_ready(record, nid, floor, retry_at, take[2], take[3]) then
    -- What notice_take would read again is known here: no notice in flight (steer_ready),
    -- the new set and the wake queue whole when each holds at most one.
    local known = {}
    if pending <= 1 then
      known.new = head
    end
    if #wakes <= 2 then
      known.wake = wakes
    end
    taken = notice_take({k[3], k[5], k[6], k[11], k[12]}, take[1], take[2], known) or ''
  end
  return {held, session, nid, floor, pending, wake[2] or '', first[2] or '', building,
    retry_at, len, rows, taken}
end
