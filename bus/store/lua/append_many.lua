-- append_many.lua: store batches of messages in their receivers' queues, each at most
-- once, and open the sender's receipt of each message stored (as receipt_open.lua would,
-- right after it). The batched form of append.lua (same keys, same records, same cap, same
-- answers): one call for several receivers on a standalone server, one per receiver on a
-- cluster (every key of a call in one slot), and no receipt call at all.
-- The receivers' keys follow each other; receiver r's start after base b (0 for the
-- first, then b + 8 + the previous receiver's message count); all in its slot {<sid>}:
-- KEYS[b+1] stream   P:{sid}:stream   the session's queue
-- KEYS[b+2] ids      P:{sid}:ids      message id -> send answer JSON (idempotency); '~' .. id
--                                      -> its receipt JSON (receipt_open.lua)
-- KEYS[b+3] threads  P:{sid}:threads  also each stored id's age: '#' .. id -> -first-seen ms
--                                      (the thread ids have positive scores)
-- KEYS[b+4] pending  P:{sid}:pending  set when a delivery is dispatched, cleared when it starts
-- KEYS[b+5] trim     P:{sid}:trim     stream id below which entries are delivered and may go
-- KEYS[b+6] events   P:{sid}:events   durability records (inbox_received)
-- KEYS[b+7] msgs     P:{sid}:msgs     the session's inbox records (counted against the cap)
-- KEYS[b+8] session  P:{sid}:session  the session's record (its host, state, last_seen,
--                                      opened_at: the send answers are made from them)
-- KEYS[b+8+j] receipt P:{sid}:rc:<id_j>  the j-th message's bounced receipt hash: it gives
--                                     way once the message is stored (receipt_open.lua)
-- ARGV[1] now ms, ARGV[2] pending TTL ms, ARGV[3] cap on held messages (0 = none); then
-- five per receiver, receiver r's from a = 3 + 5 (r - 1):
-- ARGV[a+1] the session record the answers were made from: host, state, last_seen and
--           opened_at, each ended by a newline ('' for a missing field); when the record
--           differs (or has no host: no such session) nothing of r's is written,
-- ARGV[a+2] the groups: three fields each, thread id, from handle, from session ('' = none),
-- ARGV[a+3] the messages: three fields each, message id, its group (1-based) and wire JSON,
-- ARGV[a+4], ARGV[a+5] the send answer JSON, as ids keeps it (bus/store/packing.py: no message id),
-- around the thread id: answer = ARGV[a+4] .. thread .. ARGV[a+5].
-- Every field of ARGV[a+2] and ARGV[a+3] is ended by a newline (none occurs in an id, a
-- handle, a session or in JSON): one argument each however large the batch.
-- Returns one string: a line (ended by a newline) for each thing to say, '' when nothing:
--   '<r> s <record>'     r's record differs from ARGV[a+1] or has no host: nothing of r's
--                        was written; <record> the four fields as a JSON array (false: unset)
--   '<r> p <n> <prior>'  r's n-th message is not new: its first answer (a resend, or the
--                        same id twice in one call), or -1 when the session already held
--                        the cap (not stored: inbox_full, as append.lua; no receipt)
--   '<r> d'              r's delivery is to be dispatched by the caller
-- A new message is not listed.
local now, ttl, cap = ARGV[1], ARGV[2], tonumber(ARGV[3]) or 0
local step = 500
local out = {}

-- Receiver r's messages (keys from base b, arguments from a) appended; floor its trim,
-- flagged whether its delivery is dispatched already, hashes whether any receipt hash of
-- the call's messages exists (else none is looked up one by one).
local function append(r, b, a, mids, mgroups, mfrom, mto, floor, flagged, hashes)
  local blob, head, tail = ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
  local stream, ids, events = KEYS[b + 1], KEYS[b + 2], KEYS[b + 6]
  local group = {} -- the fields of ARGV[a+2], in order: group g's are group[3g - 2 .. 3g]
  for field in string.gmatch(ARGV[a + 2], '([^\n]*)\n') do
    group[#group + 1] = field
  end
  local fresh = {} -- id -> answer, for what this call stored (ids is written at the end)
  local answers, ages = {}, {}
  -- The held count (XLEN + HLEN) is read once, then kept as an upper bound (MINID trimming
  -- only lowers XLEN) and read again only when it reaches the cap: the same answers as a
  -- count before each message, as one append.lua per message would count.
  local held = nil
  -- Every id's prior answer in a few HMGETs, not one HGET a message.
  local known = {}
  for s = 1, #mids, step do
    local got = redis.call('HMGET', ids, unpack(mids, s, math.min(s + step - 1, #mids)))
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
      out[#out + 1] = r .. ' p ' .. n .. ' ' .. prior .. '\n'
    else
      if cap > 0 and (held == nil or held >= cap) then
        held = redis.call('XLEN', stream) + redis.call('HLEN', KEYS[b + 7])
      end
      if cap > 0 and held >= cap then
        out[#out + 1] = r .. ' p ' .. n .. ' -1\n'
        stored = false
      else
        -- MINID trimming never drops an entry the delivery has not taken yet.
        redis.call('XADD', stream, 'MINID', '~', floor, '*', 'id', id, 'm',
          string.sub(blob, mfrom[n], mto[n]))
        local answer = head .. thread .. tail
        fresh[id] = answer
        answers[#answers + 1] = id
        answers[#answers + 1] = answer
        ages[#ages + 1] = '-' .. now
        ages[#ages + 1] = '#' .. id
        redis.call('XADD', events, 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_received',
          'id', id, 'thread', thread, 'at', now)
        if held then held = held + 1 end
      end
    end
    if stored then
      -- receipt_open.lua for a stored message: kept when it says stored already (in ids);
      -- a bounced one gives way (the session was opened since).
      local key, field = KEYS[b + 8 + n], '~' .. id
      local exists = hashes and redis.call('EXISTS', key) == 1
      -- (a new id has no answer, so no receipt in ids: prune drops both together)
      if not (fresh[field] or (prior and redis.call('HEXISTS', ids, field) == 1)) then
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
    redis.call('HSET', ids, unpack(answers, s, math.min(s + step - 1, #answers)))
  end
  for s = 1, #ages, step do
    redis.call('ZADD', KEYS[b + 3], unpack(ages, s, math.min(s + step - 1, #ages)))
  end
  if #ages > 0 and not flagged and redis.call('SET', KEYS[b + 4], '1', 'NX', 'PX', ttl) then
    out[#out + 1] = r .. ' d\n'
  end
end

-- Each receiver's messages (id, group, where the wire JSON is; their count places the
-- next receiver's keys), and the keys read for all receivers at once.
local parsed, flags, rcpts = {}, {}, {}
local b = 0
for a = 3, #ARGV - 5, 5 do
  local blob = ARGV[a + 3]
  local mids, mgroups, mfrom, mto = {}, {}, {}, {}
  local pos = 1
  while pos <= #blob do
    local c1 = string.find(blob, '\n', pos, true)
    local c2 = string.find(blob, '\n', c1 + 1, true)
    local c3 = string.find(blob, '\n', c2 + 1, true)
    mids[#mids + 1] = string.sub(blob, pos, c1 - 1)
    mgroups[#mgroups + 1] = 3 * (tonumber(string.sub(blob, c1 + 1, c2 - 1)) - 1)
    mfrom[#mfrom + 1] = c2 + 1
    mto[#mto + 1] = c3 - 1
    rcpts[#rcpts + 1] = KEYS[b + 8 + #mids]
    pos = c3 + 1
  end
  parsed[#parsed + 1] = {b, a, mids, mgroups, mfrom, mto}
  flags[#flags + 1] = KEYS[b + 5]
  flags[#flags + 1] = KEYS[b + 4]
  b = b + 8 + #mids
end
-- The trims and dispatch flags in one MGET, and one EXISTS over every receipt hash key (a
-- hash is rare: a bounce), not a GET and a SET NX a receiver and an EXISTS a message. (On
-- a cluster a call holds one receiver: its keys share a slot.)
local trims, hashes = {}, false
for s = 1, #flags, step do
  local got = redis.call('MGET', unpack(flags, s, math.min(s + step - 1, #flags)))
  for j = 1, #got do
    trims[s + j - 1] = got[j]
  end
end
for s = 1, #rcpts, step do
  if redis.call('EXISTS', unpack(rcpts, s, math.min(s + step - 1, #rcpts))) > 0 then
    hashes = true
  end
end
for r = 1, #parsed do
  local b, a, mids, mgroups, mfrom, mto = unpack(parsed[r])
  local rec = redis.call('HMGET', KEYS[b + 8], 'host', 'state', 'last_seen', 'opened_at')
  local said = (rec[1] or '') .. '\n' .. (rec[2] or '') .. '\n' .. (rec[3] or '') .. '\n'
    .. (rec[4] or '') .. '\n'
  if rec[1] and rec[1] ~= '' and said == ARGV[a + 1] then
    append(r, b, a, mids, mgroups, mfrom, mto, trims[2 * r - 1] or '0-0', trims[2 * r], hashes)
  else
    out[#out + 1] = r .. ' s ' .. cjson.encode(rec) .. '\n'
  end
end
return table.concat(out)
