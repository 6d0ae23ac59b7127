-- wrk script for bench/run.py. Takes requests in turn from a plan file, one per line:
-- method, path, headers ("Name: value" joined by \31) and body, tab-separated; "{u}" in a path
-- or body becomes a string unique to the run. Counts statuses, completions per second and 503s
-- without Retry-After, and prints its figures as one line of JSON starting with "BENCH ".
-- Usage: wrk ... -s bench/wrk.lua URL -- PLAN_FILE RUN_TAG
local threads = {}
local started = os.time()

function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end

function init(args)
  plan = {}
  for line in io.lines(args[1]) do
    local method, path, headers, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
    local parsed = {}
    for pair in headers:gmatch("[^\31]+") do
      local name, value = pair:match("^([^:]+): (.*)$")
      parsed[name] = value
    end
    plan[#plan + 1] = {method = method, path = path, headers = parsed, body = body}
  end
  tag = args[2]
  sent = 0
  statuses = {}
  seconds = {}
  no_retry_after = 0
end

function request()
  sent = sent + 1
  local item = plan[(sent + id * 7) % #plan + 1]
  local unique = tag .. "-" .. id .. "-" .. sent
  local path = item.path:gsub("{u}", unique)
  local body = item.body:gsub("{u}", unique)
  if body == "" then
    body = nil
  end
  return wrk.format(item.method, path, item.headers, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  local now = os.time()
  seconds[now] = (seconds[now] or 0) + 1
  if status == 503 and headers["Retry-After"] == nil and headers["retry-after"] == nil then
    no_retry_after = no_retry_after + 1
  end
end

local function merge(into, counts)
  for key, count in pairs(counts) do
    into[key] = (into[key] or 0) + count
  end
end

local function object(counts)
  local parts = {}
  for key, count in pairs(counts) do
    parts[#parts + 1] = string.format('"%d": %d', key, count)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

function done(summary, latency, requests)
  local all_statuses, all_seconds, missing = {}, {}, 0
  for _, thread in ipairs(threads) do
    merge(all_statuses, thread:get("statuses"))
    merge(all_seconds, thread:get("seconds"))
    missing = missing + thread:get("no_retry_after")
  end
  local errors = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "timeouts": %d, '
      .. '"socket_errors": %d, "no_retry_after": %d, "started": %d, "ended": %d, '
      .. '"statuses": %s, "seconds": %s}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    errors.timeout, errors.connect + errors.read + errors.write, missing, started, os.time(),
    object(all_statuses), object(all_seconds)))
end
