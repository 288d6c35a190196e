-- kick_push.lua: put delivery kicks on a host's kick list, for the delivery loops of that
-- host's workers (bus/delivery/kick_list.py), only when one of them is alive.
-- Both keys are in the host's slot {kick:<host>}.
-- KEYS[1] list    P:{kick:<host>}:list    session ids waiting for a delivery loop
-- KEYS[2] alive   P:{kick:<host>}:alive   set (with a short TTL) by every running loop
-- ARGV[1] cap     a list this long (loops stuck or gone) takes no more kicks
-- ARGV[2..] the session ids to deliver
-- Returns 1 when the ids were pushed; 0 when no loop is alive or the list is full (the
-- caller then dispatches through Celery).
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('RPUSH', KEYS[1], unpack(ARGV, 2))
return 1
