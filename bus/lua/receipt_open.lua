-- receipt_open.lua: open the sender's receipt of a message, once (a resend keeps it).
-- Runs in the send's pipeline right after append.lua, so it adds no round trip; a message
-- the append did not store (a refusal) gets no receipt.
-- All keys are in the recipient's slot {<sid>}.
-- KEYS[1] receipt  P:{sid}:rc:<id>  hash: id, to, from, from_session, thread, reason, and
--                                   the ms of each state reached
-- KEYS[2] ids      P:{sid}:ids      message id -> send answer JSON (present once stored)
-- ARGV[1] message id, ARGV[2] state: stored | bounced, ARGV[3] now ms, ARGV[4] TTL ms,
-- ARGV[5] to (recipient session), ARGV[6] from handle, ARGV[7] from session ('' = none),
-- ARGV[8] thread ('' = none), ARGV[9] reason ('' = none)
-- Returns 1 if opened, 0 if not (already open for a stored message, or nothing stored).
if redis.call('HEXISTS', KEYS[1], 'stored') == 1 then
  return 0
end
if ARGV[2] == 'stored' and redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == 'bounced' and redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
-- A bounced receipt gives way when the same id is later stored (the session was opened).
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'to', ARGV[5], 'from', ARGV[6], ARGV[2], ARGV[3])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'from_session', ARGV[7]) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'thread', ARGV[8]) end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'reason', ARGV[9]) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
