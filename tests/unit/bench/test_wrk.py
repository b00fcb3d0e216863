import json

import pytest

from kvpin.bench import wrk

REPORT = """Running 5s test @ http://127.0.0.1:8000/v1/chat/completions
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    12.06ms    3.10ms  40.12ms   80.00%
    Req/Sec     2.61k   200.00     3.00k    70.00%
  Latency Distribution
     50%   12.06ms
     75%   13.00ms
     90%   15.50ms
     99%  800.00us
  13060 requests in 5.00s, 10.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:   2612.00
Transfer/sec:      2.00MB
"""


def test_parses_throughput_latency_and_errors() -> None:
    result = wrk.parse_output(REPORT)
    assert result.requests == 13060
    assert result.requests_per_s == 2612.0
    assert result.latency_s[50] == pytest.approx(0.01206)
    assert result.latency_s[99] == pytest.approx(0.0008)
    assert result.errors == 7


def test_post_script_carries_the_body_and_headers() -> None:
    body = {"messages": [{"content": 'a "quoted" word and a \\ backslash'}]}
    script = wrk.post_script(body, {"X-Session-ID": "s"})
    assert 'wrk.method = "POST"' in script
    assert 'wrk.headers["X-Session-ID"] = "s"' in script
    (line,) = [x for x in script.splitlines() if x.startswith("wrk.body = ")]
    # a Lua string literal with JSON-compatible escapes, holding the JSON body
    assert json.loads(json.loads(line.removeprefix("wrk.body = "))) == body
