-- floor_drained.lua: notices confirmed heard (a socket's ack, or a drain that took them
-- off the floor); their messages move new -> noticed. The one place that transition is
-- made. A notice is found in the floor hash, or still in flight (a drain that ran between
-- the worker's append and its notice_done): either way it is confirmed exactly once.
-- KEYS[1] floor P:{sid}:floor (notice id -> {ids, ...}: parts/notice_done.lua), KEYS[2] msgs, KEYS[3] carried, KEYS[4] events,
-- KEYS[5] notice P:{sid}:notice, KEYS[6] session P:{sid}:session (its last_seen: the
-- harness that acked or drained was seen now; receipts read it)
-- ARGV[1] now ms, ARGV[2] via ("drain" or "socket"), ARGV[3..] notice ids
-- Returns how many notices were marked.
local marked = 0
for i = 3, #ARGV do
  local nid = ARGV[i]
  local ids = nil
  local rec_json = redis.call('HGET', KEYS[1], nid)
  if rec_json then
    ids = cjson.decode(rec_json).ids
    redis.call('HDEL', KEYS[1], nid)
  elseif redis.call('HGET', KEYS[5], 'id') == nid then
    ids = cjson.decode(redis.call('HGET', KEYS[5], 'ids'))
    redis.call('DEL', KEYS[5])
  end
  if ids then
    for _, id in ipairs(ids) do
      local raw = redis.call('HGET', KEYS[2], id)
      if raw then
        local msg = cjson.decode(raw)
        if msg.mark == 'new' then
          msg.mark = 'noticed'
          msg.notice = nid
          msg.noticed_at = tonumber(ARGV[1]) -- the receipt's `noticed` time
          redis.call('HSET', KEYS[2], id, cjson.encode(msg))
          redis.call('SADD', KEYS[3], id)
        end
      end
    end
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_noticed',
      'notice', nid, 'ids', cjson.encode(ids), 'at', ARGV[1], 'via', ARGV[2])
    marked = marked + 1
  end
end
if redis.call('EXISTS', KEYS[6]) == 1 then
  redis.call('HSET', KEYS[6], 'last_seen', ARGV[1])
end
return marked
