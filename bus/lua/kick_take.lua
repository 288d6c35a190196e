-- kick_take.lua: a delivery loop takes more kicks off its host's list, behind the one it
-- waited for (BLMOVE), into its own taken list, so a loop that dies leaves them there
-- (bus/kick.py) and not lost. It takes its share: the list over the host's live loops
-- (rounded up), at most ARGV[1], so a few kicks spread over the loops (each delivers its
-- batch in one thread) and a burst goes in batches.
-- All keys are in the host's slot {kick:<host>}.
-- KEYS[1] list    P:{kick:<host>}:list           session ids waiting for a delivery loop
-- KEYS[2] taken   P:{kick:<host>}:taken:<loop>   what this loop took and is delivering
-- KEYS[3] loops   P:{kick:<host>}:loops          the host's loops (kick_beat.lua)
-- ARGV[1] most kicks to take
-- Returns the kicks taken, oldest first (moved from the list's head to taken's tail).
local waiting = redis.call('LLEN', KEYS[1])
if waiting == 0 then
  return {}
end
local loops = math.max(1, redis.call('HLEN', KEYS[3]))
local n = math.min(tonumber(ARGV[1]), math.ceil(waiting / loops))
local got = redis.call('LRANGE', KEYS[1], 0, n - 1)
redis.call('LTRIM', KEYS[1], #got, -1)
redis.call('RPUSH', KEYS[2], unpack(got))
return got
