-- parts/notice_done.lua: the notice in flight recorded as written to the floor file
-- (included by notice_done.lua and notice_finish.lua).
-- notice_done(k, nid, now, via), k: notice P:{sid}:notice, msgs, carried, floor, events
-- (as notice_done.lua's KEYS). Returns the notice's ids, or false when it is not the one
-- in flight (a drain that took the line off the floor first has already confirmed it).
local function notice_done(k, nid, now, via)
  local f = redis.call('HMGET', k[1], 'id', 'ids', 'new', 'wake')
  if f[1] ~= nid then
    return false
  end
  local ids_json = f[2]
  local record = {
    ids = cjson.decode(ids_json),
    new = cjson.decode(f[3] or '[]'),
    wake = cjson.decode(f[4] or '[]'),
    at = tonumber(now),
  }
  redis.call('DEL', k[1])
  redis.call('HSET', k[4], nid, cjson.encode(record))
  redis.call('XADD', k[5], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_written',
    'notice', nid, 'ids', ids_json, 'at', now, 'via', via)
  return record.ids
end
