-- seen.lua: the session's harness was seen (the fast lane's touch, bus/store/fast_lane.py).
-- KEYS[1] session P:{sid}:session
-- ARGV[1] now ms
-- Sets last_seen when the session exists; returns 1.
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'last_seen', ARGV[1]) end
return 1
