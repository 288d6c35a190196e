-- extend_lock.lua: keep a session's delivery lock while a long delivery still runs.
-- KEYS[1] lock   P:{sid}:lock
-- KEYS[2] again  P:{sid}:again (the hand-off flag, if set: it lives as long as the lease)
-- ARGV[1] our token, ARGV[2] TTL ms
-- Returns 1 if we still hold it (and it was extended), 0 if we lost it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- A hand-off set with one TTL must last until this holder's unlock takes it, however
  -- many TTLs the run lasts; a dead holder's flag lapses with its lease.
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
