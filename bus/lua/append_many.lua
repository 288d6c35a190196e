-- append_many.lua: store a batch of messages in one receiver's queue, each at most once,
-- and open the sender's receipt of each message stored (as receipt_open.lua would, right
-- after it). The batched form of append.lua (same keys, same records, same cap, same
-- answers), so a batch costs one script call per receiver instead of one per message, and
-- no receipt call at all.
-- All keys are in the receiver's slot {<sid>}.
-- KEYS[1] stream   P:{sid}:stream   the session's queue
-- KEYS[2] ids      P:{sid}:ids      message id -> send answer JSON (idempotency); '~' .. id
--                                    -> its receipt JSON (receipt_open.lua; issue 13, memory)
-- KEYS[3] threads  P:{sid}:threads  also each stored id's age: '#' .. id -> -first-seen ms
--                                    (the thread ids have positive scores; issue 13, memory)
-- KEYS[4] pending  P:{sid}:pending  set when a delivery is dispatched, cleared when it starts
-- KEYS[5] trim     P:{sid}:trim     stream id below which entries are delivered and may go
-- KEYS[6] events   P:{sid}:events   durability records (inbox_received)
-- KEYS[7] msgs     P:{sid}:msgs     the session's inbox records (counted against the cap)
-- KEYS[7 + j] receipt P:{sid}:rc:<id_j>  the j-th message's receipt hash as opened before
--                                     receipts moved into ids, or a bounced one: kept when
--                                     it says stored, else it gives way (receipt_open.lua)
-- ARGV[1] now ms, ARGV[2] pending TTL ms, ARGV[3] cap on held messages (0 = none),
-- ARGV[4] receipt TTL ms, ARGV[5] to (the receiver session),
-- ARGV[6] the groups: three fields each, thread id, from handle, from session ('' = none),
-- ARGV[7] the messages: three fields each, message id, its group (1-based) and wire JSON,
-- ARGV[8], ARGV[9] the send answer JSON, as ids keeps it (bus/kept.py: no message id),
-- around the thread id: answer = ARGV[8] .. thread .. ARGV[9] (the receiver's, once per call).
-- Every field of ARGV[6] and ARGV[7] is ended by a newline (none occurs in an id, a
-- handle, a session or in JSON): one argument each however large the batch.
-- Returns {dispatch, i, prior_i, j, prior_j, ...}: dispatch is 1 when the caller should
-- dispatch a delivery; then, for each message i (1-based) that is not new, its prior:
-- its first answer for a resend (also when the same id comes twice in one batch), or -1
-- when the session already held the cap (that message is not stored: inbox_full, as
-- append.lua refuses it, and gets no receipt). A new message is not listed.
local floor = redis.call('GET', KEYS[5]) or '0-0'
-- ARGV[5] (the receiver) is no longer written into receipts: it is their key's.
local now, cap, ttl = ARGV[1], tonumber(ARGV[3]) or 0, ARGV[4]
local head, tail = ARGV[8], ARGV[9]
local group = {} -- the fields of ARGV[6], in order: group g's are group[3g - 2 .. 3g]
for field in string.gmatch(ARGV[6], '([^\n]*)\n') do
  group[#group + 1] = field
end
local out = {0}
local fresh = {} -- id -> answer, for what this call stored (ids is written at the end)
local answers, ages = {}, {}
-- The held count (XLEN + HLEN) is read once, then kept as an upper bound (MINID trimming
-- only lowers XLEN) and read again only when it reaches the cap: the same answers as a
-- count before each message, as one append.lua per message would count.
local held = nil
local blob = ARGV[7]
-- The messages first (id, group, where the wire JSON is), then every id's prior answer in
-- a few HMGETs, not one HGET a message.
local mids, mgroups, mfrom, mto = {}, {}, {}, {}
local pos = 1
while pos <= #blob do
  local a = string.find(blob, '\n', pos, true)
  local b = string.find(blob, '\n', a + 1, true)
  local c = string.find(blob, '\n', b + 1, true)
  mids[#mids + 1] = string.sub(blob, pos, a - 1)
  mgroups[#mgroups + 1] = 3 * (tonumber(string.sub(blob, a + 1, b - 1)) - 1)
  mfrom[#mfrom + 1] = b + 1
  mto[#mto + 1] = c - 1
  pos = c + 1
end
local known = {}
local step = 500
for s = 1, #mids, step do
  local got = redis.call('HMGET', KEYS[2], unpack(mids, s, math.min(s + step - 1, #mids)))
  for j = 1, #got do
    known[s + j - 1] = got[j]
  end
end
for n = 1, #mids do
  local id, g = mids[n], mgroups[n]
  local thread = group[g + 1]
  local prior = fresh[id] or known[n]
  local stored = true
  if prior then
    out[#out + 1] = n
    out[#out + 1] = prior
  else
    if cap > 0 and (held == nil or held >= cap) then
      held = redis.call('XLEN', KEYS[1]) + redis.call('HLEN', KEYS[7])
    end
    if cap > 0 and held >= cap then
      out[#out + 1] = n
      out[#out + 1] = -1
      stored = false
    else
      -- MINID trimming never drops an entry the delivery has not taken yet.
      redis.call('XADD', KEYS[1], 'MINID', '~', floor, '*', 'id', id, 'm',
        string.sub(blob, mfrom[n], mto[n]))
      local answer = head .. thread .. tail
      fresh[id] = answer
      answers[#answers + 1] = id
      answers[#answers + 1] = answer
      ages[#ages + 1] = '-' .. now
      ages[#ages + 1] = '#' .. id
      redis.call('XADD', KEYS[6], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_received', 'id', id,
        'thread', thread, 'at', now)
      if held then held = held + 1 end
    end
  end
  if stored then
    -- receipt_open.lua for a stored message: kept when it says stored already (in ids, or
    -- a hash opened before); a bounced one gives way (the session was opened since).
    local key, field = KEYS[7 + n], '~' .. id
    local exists = redis.call('EXISTS', key) == 1
    -- (a new id has no answer, so no receipt in ids: prune drops both together)
    if not (fresh[field] or (prior and redis.call('HEXISTS', KEYS[2], field) == 1)
        or (exists and redis.call('HEXISTS', key, 'stored') == 1)) then
      if exists then redis.call('DEL', key) end
      local rc = {from = group[g + 2], stored = tonumber(now)}  -- id and to: the key's
      if group[g + 3] ~= '' then rc.from_session = group[g + 3] end
      -- The thread is the answer's (beside it) unless they differ (a resend's prior).
      local said = thread
      if prior then
        said = cjson.decode(prior).thread
        if type(said) ~= 'string' then said = '' end
      end
      if said ~= thread then rc.thread = thread end
      fresh[field] = true
      answers[#answers + 1] = field
      answers[#answers + 1] = cjson.encode(rc)
    end
  end
end
-- The answers and first-seen times of what was stored, a few hundred per command.
-- (answers also holds the receipts: two fields a message stored, ages two an answer.)
for s = 1, #answers, step do
  redis.call('HSET', KEYS[2], unpack(answers, s, math.min(s + step - 1, #answers)))
end
for s = 1, #ages, step do
  redis.call('ZADD', KEYS[3], unpack(ages, s, math.min(s + step - 1, #ages)))
end
if #ages > 0 and redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[2]) then
  out[1] = 1
end
return out
