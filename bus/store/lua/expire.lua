-- expire.lua: messages no notice got in for too long end `expired` (never silently dropped:
-- the caller stamps their receipts with the ids returned).
-- All keys are in the recipient's slot {<sid>}.
-- KEYS[1] new     P:{sid}:new     ids not yet carried by a notice -> arrival ms
-- KEYS[2] wakeq   P:{sid}:wakeq   the wake-worthy subset of new
-- KEYS[3] msgs    P:{sid}:msgs    message id -> inbox record JSON
-- KEYS[4] floor   P:{sid}:floor   notice id -> record of a notice on the floor no drain
--                                 took: {"ids": [...], ...}
-- KEYS[5] events  P:{sid}:events  durability records (inbox_expired)
-- ARGV[1] cutoff ms (arrived before it: expired), ARGV[2] now ms
-- Returns the ids that expired.
local cutoff = tonumber(ARGV[1])
local out = {}
local function expire(id, rec)
  rec.mark = 'expired'
  rec.expired_at = tonumber(ARGV[2])
  redis.call('HSET', KEYS[3], id, cjson.encode(rec))
  table.insert(out, id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  local raw = redis.call('HGET', KEYS[3], id)
  if raw then expire(id, cjson.decode(raw)) end
end
-- Notices written to the floor that no drain took: their messages are still 'new'.
local floor = redis.call('HGETALL', KEYS[4])
for i = 2, #floor, 2 do
  local rec = cjson.decode(floor[i])
  for _, id in ipairs(rec.ids) do
    local raw = redis.call('HGET', KEYS[3], id)
    if raw then
      local rec = cjson.decode(raw)
      -- A record leaves out its at when it is its message's ts (bus.store.packing.keep_record).
      local at = rec.at
      if at == nil and type(rec.m) == 'table' then at = rec.m.ts end
      if rec.mark == 'new' and (tonumber(at) or 0) < cutoff then expire(id, rec) end
    end
  end
end
if #out > 0 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_expired',
    'ids', cjson.encode(out), 'at', ARGV[2])
end
return out
