-- append.lua: store one message in its receiver's queue, at most once per message id.
-- All keys are in the receiver's slot {<sid>}.
-- KEYS[1] stream   P:{sid}:stream   the session's queue
-- KEYS[2] ids      P:{sid}:ids      message id -> send answer JSON (idempotency)
-- KEYS[3] threads  P:{sid}:threads  also each stored id's age: '#' .. id -> -first-seen ms
--                                    (the thread ids have positive scores)
-- KEYS[4] pending  P:{sid}:pending  set when a delivery is dispatched, cleared when it starts
-- KEYS[5] trim     P:{sid}:trim     stream id below which entries are delivered and may go
-- KEYS[6] events   P:{sid}:events   durability records (inbox_received)
-- ARGV[1] message id, ARGV[2] wire JSON, ARGV[3] answer JSON, ARGV[4] now ms,
-- ARGV[5] pending TTL ms, ARGV[6] thread id, ARGV[7] (optional) cap on held messages
-- ARGV[8] (optional) the receiver's wake facts about the sending session ('g' or '-'),
--         kept in the entry as its 'w' field; '' none
-- KEYS[7] (optional) msgs P:{sid}:msgs  the session's inbox records
-- KEYS[8] (with ARGV[9]) receipt P:{sid}:rc:<id>  a bounced receipt of the id, which gives
--         way once the message is stored
-- ARGV[9] (optional) '1': open the sender's receipt of the stored message here, as
--         receipt_open.lua does (kept when open already), ARGV[10] from handle,
--         ARGV[11] from session ('' none), ARGV[12] reason ('' none); '' or absent: not
-- ARGV[13] (optional) kick list cap, ARGV[14] the session id, with the host's kick list and
--         its alive key as the last two KEYS (P:{kick:<host>}:list, P:{kick:<host>}:alive;
--         another slot: a standalone server only): a dispatch is pushed onto the kick list
--         here, as kick_push.lua does, when a delivery loop is alive; '' or absent: not
-- Returns {1, answer, dispatch} for a new message, {0, first answer, 0} for a resend,
-- {-1, '', 0} when the session already holds the cap (nothing is stored, no receipt).
-- dispatch: 1 the caller asks for a delivery, 0 none is needed (one was pending, or the
-- kick went onto the list here).

-- receipt_open.lua's rule for a stored message: the receipt JSON beside its answer
-- (`said`: the answer's thread), the id's bounced receipt giving way.
local function receipt_json(answer)
  redis.call('DEL', KEYS[8])
  local rc = {from = ARGV[10], stored = tonumber(ARGV[4])}
  if ARGV[11] ~= '' then rc.from_session = ARGV[11] end
  if ARGV[12] ~= '' then rc.reason = ARGV[12] end
  local said = cjson.decode(answer).thread
  if type(said) ~= 'string' then said = '' end
  if said ~= ARGV[6] then rc.thread = ARGV[6] end
  return cjson.encode(rc)
end

local receipt = ARGV[9] == '1'
local prior = redis.call('HGET', KEYS[2], ARGV[1])
if prior then
  -- A resend: its receipt kept when open already (an id stored before receipts gets one).
  if receipt and redis.call('HEXISTS', KEYS[2], '~' .. ARGV[1]) == 0 then
    redis.call('HSET', KEYS[2], '~' .. ARGV[1], receipt_json(prior))
  end
  return {0, prior, 0}
end
-- The cap counts the queue plus the inbox records: unread ones are never pruned, so a
-- flood stops here instead of growing Redis without bound.
local cap = tonumber(ARGV[7] or '0') or 0
if cap > 0 and KEYS[7] then
  if redis.call('XLEN', KEYS[1]) + redis.call('HLEN', KEYS[7]) >= cap then
    return {-1, '', 0}
  end
end
local floor = redis.call('GET', KEYS[5]) or '0-0'
-- MINID trimming never drops an entry the delivery has not taken yet.
if ARGV[8] and ARGV[8] ~= '' then
  redis.call('XADD', KEYS[1], 'MINID', '~', floor, '*', 'id', ARGV[1], 'm', ARGV[2], 'w', ARGV[8])
else
  redis.call('XADD', KEYS[1], 'MINID', '~', floor, '*', 'id', ARGV[1], 'm', ARGV[2])
end
-- A new id has no receipt yet (an answer and its receipt are pruned together): both in
-- one write.
if receipt then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3], '~' .. ARGV[1], receipt_json(ARGV[3]))
else
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
redis.call('ZADD', KEYS[3], '-' .. ARGV[4], '#' .. ARGV[1])
redis.call('XADD', KEYS[6], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_received', 'id', ARGV[1],
  'thread', ARGV[6], 'at', ARGV[4])
local dispatch = redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[5])
if not dispatch then
  return {1, ARGV[3], 0}
end
if ARGV[13] and ARGV[13] ~= '' then
  local list, alive = KEYS[#KEYS - 1], KEYS[#KEYS]
  if redis.call('EXISTS', alive) == 1 then
    -- Pushed, then taken back off when that made the list longer than its cap: a list
    -- already at its cap takes no more.
    if redis.call('RPUSH', list, ARGV[14]) <= tonumber(ARGV[13]) then
      return {1, ARGV[3], 0}
    end
    redis.call('RPOP', list)
  end
end
return {1, ARGV[3], 1}
