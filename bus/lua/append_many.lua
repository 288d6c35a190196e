-- append_many.lua: store a batch of messages in one receiver's queue, each at most once.
-- The batched form of append.lua (same keys, same records, same cap, same answers), so a
-- batch costs one script call per receiver instead of one per message.
-- All keys are in the receiver's slot {<sid>}.
-- KEYS[1] stream   P:{sid}:stream   the session's queue
-- KEYS[2] ids      P:{sid}:ids      message id -> send answer JSON (idempotency)
-- KEYS[3] idsage   P:{sid}:idsage   message id -> first-seen ms
-- KEYS[4] pending  P:{sid}:pending  set when a delivery is dispatched, cleared when it starts
-- KEYS[5] trim     P:{sid}:trim     stream id below which entries are delivered and may go
-- KEYS[6] events   P:{sid}:events   durability records (inbox_received)
-- KEYS[7] msgs     P:{sid}:msgs     the session's inbox records (counted against the cap)
-- ARGV[1] now ms, ARGV[2] pending TTL ms, ARGV[3] cap on held messages (0 = none),
-- then four per message from ARGV[4]: message id, wire JSON, answer JSON, thread id
-- Returns {dispatch, prior_1, prior_2, ...}: dispatch is 1 when the caller should
-- dispatch a delivery; prior_i is '' for a new message, its first answer for a resend
-- (also when the same id comes twice in one batch), or -1 when the session already
-- held the cap (that message is not stored: inbox_full, as append.lua refuses it).
local floor = redis.call('GET', KEYS[5]) or '0-0'
local cap = tonumber(ARGV[3]) or 0
local out = {0}
local added = 0
for i = 4, #ARGV, 4 do
  local id = ARGV[i]
  local prior = redis.call('HGET', KEYS[2], id)
  if prior then
    out[#out + 1] = prior
  elseif cap > 0 and redis.call('XLEN', KEYS[1]) + redis.call('HLEN', KEYS[7]) >= cap then
    -- Counted anew for each message, as one append.lua per message would count.
    out[#out + 1] = -1
  else
    -- MINID trimming never drops an entry the delivery has not taken yet.
    redis.call('XADD', KEYS[1], 'MINID', '~', floor, '*', 'id', id, 'm', ARGV[i + 1])
    redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    redis.call('ZADD', KEYS[3], ARGV[1], id)
    redis.call('XADD', KEYS[6], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_received', 'id', id,
      'thread', ARGV[i + 3], 'at', ARGV[1])
    out[#out + 1] = ''
    added = added + 1
  end
end
if added > 0 and redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[2]) then
  out[1] = 1
end
return out
