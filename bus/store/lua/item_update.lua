-- item_update.lua: change one item and, optionally, append an entry to its thread, as
-- one step (a reply's entry and its moved updatedAt are written together or not at all).
-- Both keys are in the owning session's slot {<sid>}.
-- KEYS[1] items   P:{sid}:items              hash: item key -> item JSON
-- KEYS[2] thread  P:{sid}:item:<key>:thread  list: entry JSON, oldest first
-- ARGV[1] item key
-- ARGV[2] JSON object of fields to set on the item (a null clears a field to null)
-- ARGV[3] entry JSON to append ('' = none)
-- Returns the updated item JSON, or false when the session has no item under the key.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return false end
local item = cjson.decode(raw)
for k, v in pairs(cjson.decode(ARGV[2])) do item[k] = v end
local out = cjson.encode(item)
redis.call('HSET', KEYS[1], ARGV[1], out)
if ARGV[3] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[3]) end
return out
