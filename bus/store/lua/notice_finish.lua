-- notice_finish.lua: what follows a notice's write, in one call (bus.store.delivery's
-- finish_calls; a due wake's calls to pack and replies to parse). All keys are
-- in the session's slot {<sid>}.
-- KEYS[1] notice  P:{sid}:notice
-- KEYS[2] msgs    P:{sid}:msgs
-- KEYS[3] carried P:{sid}:carried
-- KEYS[4] floor   P:{sid}:floor
-- KEYS[5] events  P:{sid}:events
-- KEYS[6] session P:{sid}:session
-- KEYS[7] lock    P:{sid}:lock
-- KEYS[8] again   P:{sid}:again
-- KEYS[9] kicks   P:{kick:<host>}:list, optional (standalone servers only: another slot):
--         a kick loop that reads this reply only after its next wait, sent behind it
-- ARGV[1] notice id, ARGV[2] now ms (the notice's clock), ARGV[3] via
-- ARGV[4] '1': record the notice written to the floor first (parts/notice_done.lua);
--         'heard': a socket's ack confirmed it: its messages noticed first (parts/drained.lua,
--         as floor_drained.lua); '' neither
-- ARGV[5] now ms (the system clock's: the session's and the wake record's times)
-- ARGV[6] '1': the session's state set running (updated_at ARGV[5]) and woken_at ARGV[2]
--         (a harness's turn start clears it; wake_timeout.lua ends a wake never heard);
--         '' not
-- ARGV[7] wake_pending: the notice whose wake command is about to run; '' none
-- ARGV[8] our lock token: the lock freed and the hand-off flag taken last
--         (parts/unlock.lua); '' neither
-- ARGV[9] the session id, pushed onto KEYS[9] when the unlock finds the session must run
--         again (its hand-off flag taken, or its lock no longer ours); '' no push
-- ARGV[10..] a wake record's fields and values after kind and at (none: no record)
-- Drops the session's retry_at. Returns {freed, again} (parts/unlock.lua) with a token,
-- else {0, 0}.
--@include notice_done
--@include drained
--@include unlock
local seen = false
if ARGV[4] == '1' then
  notice_done(KEYS, ARGV[1], ARGV[2], ARGV[3])
elseif ARGV[4] == 'heard' then
  -- The notice just written is most likely still in flight: looked for there first. The
  -- session's last_seen goes in the one write of the session below.
  drained(KEYS[4], KEYS[2], KEYS[3], KEYS[5], KEYS[1], nil, ARGV[2], ARGV[3], {ARGV[1]}, true)
  seen = redis.call('EXISTS', KEYS[6]) == 1
end
redis.call('HDEL', KEYS[6], 'retry_at')
if ARGV[6] == '1' then
  local set = {'updated_at', ARGV[5], 'state', 'running', 'woken_at', ARGV[2]}
  if ARGV[7] ~= '' then
    set[#set + 1] = 'wake_pending'
    set[#set + 1] = ARGV[7]
  end
  if seen then
    set[#set + 1] = 'last_seen'
    set[#set + 1] = ARGV[2]
  end
  redis.call('HSET', KEYS[6], unpack(set))
elseif seen then
  redis.call('HSET', KEYS[6], 'last_seen', ARGV[2])
end
if #ARGV > 9 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'wake', 'at', ARGV[5],
    unpack(ARGV, 10))
end
if ARGV[8] ~= '' then
  local freed, again = unlock(KEYS[7], KEYS[8], ARGV[8])
  if ARGV[9] ~= '' and (freed == 0 or again == 1) then
    redis.call('RPUSH', KEYS[9], ARGV[9])
  end
  return {freed, again}
end
return {0, 0}
