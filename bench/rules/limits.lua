-- bench/rules/limits.lua — wrk script for bench/rules/limits: every request carries
-- `X-Key: kI`, I rotating over KEYS keys (environment, default 10000); every answer is
-- counted by status, and each 200 under the key weir echoes back in its `X-Key` field
-- (the client's own count, independent of weir's). Each key's first and last send and
-- its longest gap between two sends are noted on a clock read from /proc/uptime every
-- 256 requests (10 ms ticks), and the configured bucket (RATE per second, BURST; GCRA as
-- weir's limiter, docs/design/rules.md) is applied to each key's own sends on that clock:
-- what a perfect limiter would admit of what this client sent, whatever the drive's pace.
-- done() writes one line per key, "key admitted model first last longest_gap" (seconds),
-- then "#refused N" and "#other N", to the file named by COUNTS.

local keys = tonumber(os.getenv("KEYS") or "10000")
local interval = 1 / tonumber(os.getenv("RATE") or "1")
local tolerance = (tonumber(os.getenv("BURST") or "1") - 1) * interval
local threads = {}

function clock()
   local file = io.open("/proc/uptime")
   local seconds = file:read("*n")
   file:close()
   return seconds
end

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

function init(args)
   -- Globals, so done() can read them with thread:get.
   admitted = {}
   refused = 0
   other = 0
   -- Each thread starts at its own place in the rotation.
   next_key = (id or 0) * 7919 % keys
   first, last, gap, model, tat = {}, {}, {}, {}, {}
   sent = 0
   now = clock()
   host = wrk.headers["Host"] or "limits.example.com"
end

function request()
   next_key = next_key % keys + 1
   sent = sent + 1
   if sent % 256 == 0 then
      now = clock()
   end
   local k = next_key
   if first[k] == nil then
      first[k], gap[k] = now, 0
   elseif now - last[k] > gap[k] then
      gap[k] = now - last[k]
   end
   last[k] = now
   local arrival = tat[k]
   if arrival == nil then
      model[k], tat[k] = 1, now + interval
   elseif now >= arrival - tolerance then
      model[k], tat[k] = model[k] + 1, math.max(arrival, now) + interval
   end
   return wrk.format("GET", "/limited", { ["Host"] = host, ["X-Key"] = "k" .. next_key })
end

function response(status, headers, body)
   if status == 200 then
      local key = headers["X-Key"]
      if key then
         admitted[key] = (admitted[key] or 0) + 1
      else
         other = other + 1
      end
   elseif status == 429 then
      refused = refused + 1
   else
      other = other + 1
   end
end

function done(summary, latency, requests)
   local out = assert(io.open(os.getenv("COUNTS"), "w"))
   local refused_all, other_all = 0, 0
   for _, thread in ipairs(threads) do
      local admitted, model = thread:get("admitted"), thread:get("model")
      local first, last, gap = thread:get("first"), thread:get("last"), thread:get("gap")
      for k = 1, keys do
         if first[k] ~= nil then
            out:write("k", k, " ", admitted["k" .. k] or 0, " ", model[k], " ", first[k], " ", last[k], " ", gap[k], "\n")
         end
      end
      refused_all = refused_all + thread:get("refused")
      other_all = other_all + thread:get("other")
   end
   out:write("#refused ", refused_all, "\n")
   out:write("#other ", other_all, "\n")
   out:close()
end
