-- item_post.lua: post an item, or post it again as its next revision.
-- KEYS[1] items  P:{sid}:items  hash: item key -> item JSON (the session's slot {<sid>})
-- ARGV[1] item key, ARGV[2] the new item's JSON (revision 1, createdAt now)
-- A re-post keeps createdAt, takes revision + 1 and the new fields (status open, answer
-- and settledAt cleared). Returns the stored item JSON.
local new = cjson.decode(ARGV[2])
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local old = cjson.decode(raw)
  new.revision = (tonumber(old.revision) or 0) + 1
  new.createdAt = old.createdAt
end
local out = cjson.encode(new)
redis.call('HSET', KEYS[1], ARGV[1], out)
return out
