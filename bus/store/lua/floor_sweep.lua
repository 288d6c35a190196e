-- floor_sweep.lua: notices written to the floor and never confirmed. One still on the floor
-- (queue or a claim) is left to its drain. One gone from the floor without a confirmation
-- (its drainer died between taking it and recording it) is marked gone; still gone after
-- the grace, its messages that are still new go back to `new` (and `wakeq`), so the next
-- notice carries them: a duplicate notice after a crash rather than a silent loss.
-- KEYS[1] floor P:{sid}:floor (notice id -> {ids, new, wake, at, ...}: parts/notice_done.lua),
-- KEYS[2] msgs, KEYS[3] new, KEYS[4] wakeq, KEYS[5] events
-- ARGV[1] now ms, ARGV[2] grace ms, ARGV[3..] pairs: notice id, "1" on the floor / "0" gone
-- Returns how many notices were given back. A message given back is marked ``again``
-- (parts/mark_again.lua): its drainer may have handed it on before it died.
--@include mark_again
local now = tonumber(ARGV[1])
local grace = tonumber(ARGV[2])
local given_back = 0
for i = 3, #ARGV, 2 do
  local nid = ARGV[i]
  local rec_json = redis.call('HGET', KEYS[1], nid)
  if rec_json then
    local rec = cjson.decode(rec_json)
    if ARGV[i + 1] == '1' then
      -- Still there: written only when it was seen gone before (a look that finds
      -- nothing changed writes nothing: the scheduler times looks from the record's at).
      if rec.gone ~= nil then
        rec.gone = nil
        redis.call('HSET', KEYS[1], nid, cjson.encode(rec))
      end
    elseif rec.gone == nil then
      rec.gone = now
      redis.call('HSET', KEYS[1], nid, cjson.encode(rec))
    elseif now - rec.gone >= grace then
      local score, wakes = {}, {}
      for j = 1, #rec.new, 2 do score[rec.new[j]] = rec.new[j + 1] end
      for j = 1, #rec.wake, 2 do wakes[rec.wake[j]] = rec.wake[j + 1] end
      for _, id in ipairs(rec.ids) do
        local raw = redis.call('HGET', KEYS[2], id)
        if raw then
          local msg = cjson.decode(raw)
          -- A record leaves out its at when it is its message's ts (bus.store.packing.keep_record).
          if msg.at == nil and type(msg.m) == 'table' then msg.at = msg.m.ts end
          if msg.mark == 'new' then
            mark_again(KEYS[2], id)
            redis.call('ZADD', KEYS[3], score[id] or msg.at or now, id)
            if wakes[id] then
              redis.call('ZADD', KEYS[4], wakes[id], id)
            end
          end
        end
      end
      redis.call('HDEL', KEYS[1], nid)
      redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_unconfirmed',
        'notice', nid, 'ids', cjson.encode(rec.ids), 'at', ARGV[1])
      given_back = given_back + 1
    end
  end
end
return given_back
