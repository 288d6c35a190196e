-- parts/drained.lua: notices confirmed heard (a socket's ack, or a drain that took them
-- off the floor); their messages move new -> noticed. The one place that transition is
-- made (included by floor_drained.lua and notice_finish.lua). A notice is found in the
-- floor hash, or still in flight (a drain that ran between the worker's append and its
-- notice_done): either way it is confirmed exactly once.
-- drained(floor, msgs, carried, events, notice, session, now, via, nids, flight_first): the
-- keys are P:{sid}:floor (notice id -> {ids, ...}: parts/notice_done.lua), msgs, carried,
-- events, notice, session (its last_seen: the harness that acked or drained was seen now;
-- receipts read it; nil: the caller records it). flight_first: look for each notice in
-- flight before the floor (a socket's ack of the notice just written), else the floor
-- first. Returns how many notices were marked.
local function drained(floor, msgs, carried, events, notice, session, now, via, nids,
    flight_first)
  local marked = 0
  for _, nid in ipairs(nids) do
    local ids = nil
    local flight = nil
    if flight_first then
      flight = redis.call('HMGET', notice, 'id', 'ids')
    end
    local rec_json = nil
    if not (flight and flight[1] == nid) then
      rec_json = redis.call('HGET', floor, nid)
    end
    if rec_json then
      ids = cjson.decode(rec_json).ids
      redis.call('HDEL', floor, nid)
    else
      if not flight then
        flight = redis.call('HMGET', notice, 'id', 'ids')
      end
      if flight[1] == nid then
        ids = cjson.decode(flight[2])
        redis.call('DEL', notice)
      end
    end
    if ids then
      -- Read and written in chunks: unpack() of thousands of ids would overflow Lua's stack.
      for i = 1, #ids, 1000 do
        local part = {unpack(ids, i, math.min(i + 999, #ids))}
        local raws = redis.call('HMGET', msgs, unpack(part))
        local writes, moved = {}, {}
        for j, id in ipairs(part) do
          local raw = raws[j]
          if raw then
            local msg = cjson.decode(raw)
            if msg.mark == 'new' then
              msg.mark = 'noticed'
              msg.notice = nid
              msg.noticed_at = tonumber(now) -- the receipt's `noticed` time
              writes[#writes + 1] = id
              writes[#writes + 1] = cjson.encode(msg)
              moved[#moved + 1] = id
            end
          end
        end
        if #moved > 0 then
          redis.call('HSET', msgs, unpack(writes))
          redis.call('SADD', carried, unpack(moved))
        end
      end
      redis.call('XADD', events, 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_noticed',
        'notice', nid, 'ids', cjson.encode(ids), 'at', now, 'via', via)
      marked = marked + 1
    end
  end
  if session and redis.call('EXISTS', session) == 1 then
    redis.call('HSET', session, 'last_seen', now)
  end
  return marked
end
