-- floor_drained.lua: notices taken off the floor by a drain; their messages are noticed.
-- KEYS[1] floor P:{sid}:floor, KEYS[2] msgs, KEYS[3] carried, KEYS[4] events
-- ARGV[1] now ms, ARGV[2..] notice ids
-- Returns how many notices were marked.
local marked = 0
for i = 2, #ARGV do
  local ids_json = redis.call('HGET', KEYS[1], ARGV[i])
  if ids_json then
    for _, id in ipairs(cjson.decode(ids_json)) do
      local raw = redis.call('HGET', KEYS[2], id)
      if raw then
        local rec = cjson.decode(raw)
        if rec.mark == 'new' then
          rec.mark = 'noticed'
          rec.notice = ARGV[i]
          redis.call('HSET', KEYS[2], id, cjson.encode(rec))
          redis.call('SADD', KEYS[3], id)
        end
      end
    end
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_noticed',
      'notice', ARGV[i], 'ids', ids_json, 'at', ARGV[1], 'via', 'drain')
    marked = marked + 1
  end
end
return marked
