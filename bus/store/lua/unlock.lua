-- unlock.lua: release a session's delivery lock only if we still hold it.
-- KEYS[1] lock   P:{sid}:lock
-- KEYS[2] again  P:{sid}:again (optional: the hand-off flag, taken after the unlock)
-- ARGV[1] our token
-- Returns 1 when the lock was ours and is freed, else 0; with KEYS[2], {that, 1 when the
-- hand-off flag was set (and is now taken), else 0}: the unlock and the flag's take in
-- one call, in that order, whoever held the lock. The steps: parts/unlock.lua.
--@include unlock
local freed, again = unlock(KEYS[1], KEYS[2], ARGV[1])
if KEYS[2] then
  return {freed, again}
end
return freed
