-- kick_take.lua: a delivery loop takes the kicks waiting on its host's list, without
-- blocking (it waits with BLMOVE only when none is there), into its own taken list, so a
-- loop that dies leaves them there (bus/delivery/kick_list.py) and not lost. It takes up to ARGV[1] (greedy: a share of the list per
-- live loop made more, smaller batches running at once, and the wakes of a burst later).
-- All keys are in the host's slot {kick:<host>}.
-- KEYS[1] list    P:{kick:<host>}:list           session ids waiting for a delivery loop
-- KEYS[2] taken   P:{kick:<host>}:taken:<loop>   what this loop took and is delivering
-- ARGV[1] most kicks to take
-- ARGV[2] '1': the taken list holds kicks the loop delivered: emptied first (the loop's
--         done, in this call); '' not
-- Returns the kicks taken, oldest first (moved from the list's head to taken's tail).
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[2])
end
local got = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #got == 0 then
  return got
end
redis.call('LTRIM', KEYS[1], #got, -1)
redis.call('RPUSH', KEYS[2], unpack(got))
return got
