-- parts/unlock.lua: free a session's delivery lock if it is still ours, then take the
-- hand-off flag (included by unlock.lua and notice_finish.lua).
-- unlock(lock, again, token): lock P:{sid}:lock; again P:{sid}:again or nil (no flag
-- taken). Returns freed (1 when the lock was ours and is freed, else 0) and again (1 when
-- the flag was set and is now taken, whoever held the lock; 0 without it).
local function unlock(lock, again, token)
  local freed = 0
  if redis.call('GET', lock) == token then
    freed = redis.call('DEL', lock)
  end
  local flag = 0
  if again and redis.call('GETDEL', again) then
    flag = 1
  end
  return freed, flag
end
