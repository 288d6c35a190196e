-- parts/drained.lua: notices confirmed heard (a socket's ack, or a drain that took them
-- off the floor); their messages move new -> noticed. The one place that transition is
-- made (included by floor_drained.lua and notice_finish.lua). A notice is found in the
-- floor hash, or still in flight (a drain that ran between the worker's append and its
-- notice_done): either way it is confirmed exactly once.
-- drained(floor, msgs, carried, events, notice, session, now, via, nids): the keys are
-- P:{sid}:floor (notice id -> {ids, ...}: parts/notice_done.lua), msgs, carried, events,
-- notice, session (its last_seen: the harness that acked or drained was seen now;
-- receipts read it). Returns how many notices were marked.
local function drained(floor, msgs, carried, events, notice, session, now, via, nids)
  local marked = 0
  for _, nid in ipairs(nids) do
    local ids = nil
    local rec_json = redis.call('HGET', floor, nid)
    if rec_json then
      ids = cjson.decode(rec_json).ids
      redis.call('HDEL', floor, nid)
    elseif redis.call('HGET', notice, 'id') == nid then
      ids = cjson.decode(redis.call('HGET', notice, 'ids'))
      redis.call('DEL', notice)
    end
    if ids then
      for _, id in ipairs(ids) do
        local raw = redis.call('HGET', msgs, id)
        if raw then
          local msg = cjson.decode(raw)
          if msg.mark == 'new' then
            msg.mark = 'noticed'
            msg.notice = nid
            msg.noticed_at = tonumber(now) -- the receipt's `noticed` time
            redis.call('HSET', msgs, id, cjson.encode(msg))
            redis.call('SADD', carried, id)
          end
        end
      end
      redis.call('XADD', events, 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_noticed',
        'notice', nid, 'ids', cjson.encode(ids), 'at', now, 'via', via)
      marked = marked + 1
    end
  end
  if redis.call('EXISTS', session) == 1 then
    redis.call('HSET', session, 'last_seen', now)
  end
  return marked
end
