-- floor_woken.lua: a wake is run for the file floor's notices no drain took (an idle
-- session whose running turn ended before the harness drained a notice written for it):
-- mark each such record woken, so the same notices wake the session once, not at every
-- turn end of a harness that never drains. Records a drain took (gone) are left alone.
-- KEYS[1] floor P:{sid}:floor
-- ARGV[1] now ms
-- Returns the ids of the notices marked (none: a drain took them all meanwhile).
local marked = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, rec = pcall(cjson.decode, all[i + 1])
  if ok and type(rec) == 'table' and rec.ids ~= nil and rec.gone == nil and rec.woken == nil then
    rec.woken = tonumber(ARGV[1])
    redis.call('HSET', KEYS[1], all[i], cjson.encode(rec))
    marked[#marked + 1] = all[i]
  end
end
return marked
