-- receipt_open.lua: open the sender's receipts of messages to one recipient, each once (a
-- resend keeps it). A message the append did not store (a refusal) gets no receipt. A
-- send's stored message opens its receipt inside append.lua, a batch's inside
-- append_many.lua (the same rule); a bounced one here, in the send's pipeline.
-- All keys are in the recipient's slot {<sid>}.
-- KEYS[1] ids      P:{sid}:ids      message id -> send answer JSON (present once stored);
--                                   '~' .. id -> a stored message's receipt (JSON: from,
--                                   from_session, thread when not the answer's, reason,
--                                   and the ms of each state reached)
-- KEYS[1 + i] receipt  P:{sid}:rc:<id_i>  hash: a bounced message's receipt (its
--                                         session is not registered, so nothing prunes
--                                         its ids)
-- ARGV[1] now ms, ARGV[2] TTL ms, ARGV[3] to (recipient session: the key's, not written),
-- then six per message
-- from ARGV[4]: message id, state (stored | bounced), from handle, from session ('' =
-- none), thread ('' = none), reason ('' = none)
-- Returns how many were opened (not: already open for a stored message, or not stored).
local opened = 0
local n = 1
for i = 4, #ARGV, 6 do
  n = n + 1
  local key = KEYS[n]
  local id, state = ARGV[i], ARGV[i + 1]
  local field = '~' .. id
  local folded = redis.call('HEXISTS', KEYS[1], field) == 1
  local skip = folded
    or (state == 'stored' and redis.call('HEXISTS', KEYS[1], id) == 0)
    or (state == 'bounced' and redis.call('EXISTS', key) == 1)
  if not skip then
    -- A bounced receipt gives way when the same id is later stored (the session was opened).
    redis.call('DEL', key)
    if state == 'stored' then
      local rc = {from = ARGV[i + 2], stored = tonumber(ARGV[1])}
      if ARGV[i + 3] ~= '' then rc.from_session = ARGV[i + 3] end
      if ARGV[i + 5] ~= '' then rc.reason = ARGV[i + 5] end
      -- The thread is the answer's (beside it) unless they differ.
      local ans = cjson.decode(redis.call('HGET', KEYS[1], id))
      local thread = ARGV[i + 4]
      local said = ans.thread
      if type(said) ~= 'string' then said = '' end
      if said ~= thread then rc.thread = thread end
      redis.call('HSET', KEYS[1], field, cjson.encode(rc))
    else
      local fields = {'from', ARGV[i + 2], state, ARGV[1]}
      for f, name in ipairs({'from_session', 'thread', 'reason'}) do
        if ARGV[i + 2 + f] ~= '' then
          fields[#fields + 1] = name
          fields[#fields + 1] = ARGV[i + 2 + f]
        end
      end
      redis.call('HSET', key, unpack(fields))
      redis.call('PEXPIRE', key, ARGV[2])
    end
    opened = opened + 1
  end
end
return opened
