-- hosts_flag.lua: the due sessions' hosts, each existing one's dispatch flag set, in one
-- call (bus.delivery.scheduler's dispatch of a burst of due wakes: one command to pack and one
-- reply to parse, not two a session). Standalone servers only: the keys of many
-- sessions' slots (a cluster reads and flags them in pipelines).
-- KEYS[2i-1] session P:{sid}:session, KEYS[2i] pending P:{sid}:pending, for each session
-- ARGV[1] the flag's TTL ms (the lock TTL)
-- Returns JSON: each session's host, in order, or '' for one that does not exist (its
-- flag not set).
local hosts = {}
for i = 1, #KEYS, 2 do
  local host = redis.call('HGET', KEYS[i], 'host')
  if host then
    redis.call('SET', KEYS[i + 1], '1', 'PX', ARGV[1])
  end
  hosts[#hosts + 1] = host or ''
end
return cjson.encode(hosts)
