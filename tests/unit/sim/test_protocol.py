import pytest

from kvpin.sim import protocol

SERVED = ("ep-a", "sim-8b")


def parse(body, kind="chat", max_model_len=1000):
    return protocol.parse(kind, body, served=SERVED, max_model_len=max_model_len)


CHAT = {"model": "ep-a", "messages": [{"role": "user", "content": "hi"}]}


def test_a_chat_request_is_tokenized() -> None:
    request = parse(
        {**CHAT, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert request.max_tokens == 3
    assert request.stream and request.include_usage
    assert len(request.prompt) > 3


def test_completions_take_text_or_token_ids() -> None:
    assert parse({"model": "ep-a", "prompt": [5, 6, 7]}, kind="text").prompt == [5, 6, 7]
    assert len(parse({"model": "ep-a", "prompt": "a b"}, kind="text").prompt) == 3


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ([1, 2], 400, "JSON object"),
        ({"messages": CHAT["messages"]}, 400, "`model` is required"),
        ({**CHAT, "model": "gpt-4"}, 404, "does not exist"),
        ({**CHAT, "messages": []}, 400, "non-empty list"),
        ({**CHAT, "messages": "hi"}, 400, "non-empty list"),
        ({**CHAT, "messages": [{"content": "no role"}]}, 400, "string `role`"),
        ({**CHAT, "messages": [{"role": "user", "content": 5}]}, 400, "content must be"),
        ({**CHAT, "max_tokens": 0}, 400, "positive integer"),
        ({**CHAT, "max_tokens": "9"}, 400, "positive integer"),
        ({**CHAT, "stream": "yes"}, 400, "`stream` must be a boolean"),
        ({**CHAT, "tools": {}}, 400, "`tools` must be a list"),
        ({**CHAT, "max_tokens": 999}, 400, "maximum context length is 1000"),
    ],
)
def test_bad_requests_get_the_right_status(body, status: int, fragment: str) -> None:
    with pytest.raises(protocol.ProtocolError) as err:
        parse(body)
    assert err.value.status == status
    assert fragment in err.value.message


@pytest.mark.parametrize("prompt", [None, "", [], ["a", "b"], [1, -1], [True]])
def test_bad_completion_prompts(prompt) -> None:
    with pytest.raises(protocol.ProtocolError, match="prompt"):
        parse({"model": "ep-a", "prompt": prompt}, kind="text")


def test_usage_has_openai_and_deepseek_fields() -> None:
    assert protocol.usage(100, 5, 64) == {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "total_tokens": 105,
        "prompt_tokens_details": {"cached_tokens": 64},
        "prompt_cache_hit_tokens": 64,
        "prompt_cache_miss_tokens": 36,
    }


def test_error_document_shape() -> None:
    body = protocol.ProtocolError(413, "too big").to_body()
    assert body == {"error": {"message": "too big", "type": "invalid_request_error",
                              "param": None, "code": None}}  # fmt: skip


def test_a_named_pod_is_in_every_document_of_the_response_and_an_unnamed_one_nowhere() -> None:
    request = parse({**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    for pod, expected in (("pod-2", {"pod-2"}), (None, set())):
        ids = protocol.Ids.new("chat", "ep-a", pod)
        documents = [
            protocol.completion(request, ids, "x", 1, 0),
            protocol.chunk(request, ids, "x", first=True),
            protocol.chunk(request, ids, None, finish="length"),
            protocol.usage_chunk(request, ids, 1, 0),
        ]
        for document in documents:
            assert document["id"] == ids.id
            found = {document["system_fingerprint"]} if "system_fingerprint" in document else set()
            assert found == expected
