import json

import pytest

from kvpin.sim import tokens

SYSTEM = {"role": "system", "content": "You are a careful support agent."}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"b": 1, "a": 2}}}]


def test_tokenizer_is_deterministic_and_word_level() -> None:
    ids = tokens.tokenize("Hello, world!  Hello")
    assert len(ids) == 7  # Hello , ' ' world ! '  ' Hello: words, punctuation, spaces
    assert ids[0] == ids[-1]
    assert tokens.tokenize("Hello, world!  Hello") == ids
    assert tokens.IM_START not in ids and tokens.IM_END not in ids


def test_a_conversation_extends_its_previous_prompt() -> None:
    history = [SYSTEM, {"role": "user", "content": "Where is my order?"}]
    first = tokens.render_chat(history, TOOLS)
    history += [
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": "Thanks"},
    ]
    second = tokens.render_chat(history, TOOLS)
    assert second[: len(first)] == first  # append-only history -> prefix-stable prompt


def test_tools_are_serialized_with_sorted_keys() -> None:
    reordered = [
        {"function": {"parameters": {"a": 2, "b": 1}, "name": "lookup"}, "type": "function"}
    ]
    messages = [SYSTEM, {"role": "user", "content": "hi"}]
    assert tokens.render_chat(messages, TOOLS) == tokens.render_chat(messages, reordered)


def test_changing_tools_or_system_prompt_changes_the_prefix() -> None:
    messages = [SYSTEM, {"role": "user", "content": "hi"}]
    base = tokens.render_chat(messages, TOOLS)
    other_tools = tokens.render_chat(messages, [{"type": "function", "function": {"name": "x"}}])
    edited = tokens.render_chat(
        [{"role": "system", "content": "You are a careless support agent."}, messages[1]], TOOLS
    )
    first_message = [i for i, t in enumerate(base) if t == tokens.IM_START][1]
    for changed in (other_tools, edited):
        common = next(i for i, (a, b) in enumerate(zip(base, changed, strict=False)) if a != b)
        assert common < first_message  # diverges in the head, before any message


def test_content_parts_are_read_as_text() -> None:
    parts = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]
    assert tokens.render_chat(parts) == tokens.render_chat([{"role": "user", "content": "ab"}])


def test_a_real_tokenizer_file_can_replace_the_word_tokenizer(tmp_path) -> None:
    import tokenizers
    from tokenizers import models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    encode = tokens.load_tokenizer(str(path))
    assert encode("hello world nope") == [1, 2, 0]


def words(text: str) -> list[int]:
    """The documented tokenizer, written out: one CRC-32 per piece, the 0x100 bit set."""
    import re
    import zlib

    return [zlib.crc32(p.encode()) | 0x100 for p in re.findall(r"\w+|[^\w\s]|\s+", text)]


S, E = tokens.IM_START, tokens.IM_END


def test_the_word_tokenizer_is_the_documented_one() -> None:
    text = "Où est-il? 42 times\n\tok"
    assert tokens.tokenize(text) == words(text)
    assert len(tokens.tokenize(text)) == 12  # Où,' ',est,-,il,?,' ',42,' ',times,'\n\t',ok
    assert tokens.tokenize("") == []


def test_the_chat_template_is_the_documented_layout() -> None:
    call = [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Order 7?"},
        {"role": "assistant", "content": None, "tool_calls": call},
        {"role": "tool", "content": [{"type": "text", "text": "shipped"}, "junk"]},
        {"content": "no role"},
    ]
    tools_json = json.dumps(TOOLS, sort_keys=True, separators=(",", ":"))
    calls_json = json.dumps(call, sort_keys=True, separators=(",", ":"))
    expected = [
        *[S, *words("system\nBe brief."), *words("\n# Tools\n" + tools_json), E, *words("\n")],
        *[S, *words("user\nOrder 7?"), E, *words("\n")],
        *[S, *words("assistant\n" + calls_json), E, *words("\n")],
        *[S, *words("tool\nshipped"), E, *words("\n")],
        *[S, *words("user\nno role"), E, *words("\n")],
        *[S, *words("assistant\n")],
    ]
    assert tokens.render_chat(messages, TOOLS) == expected


def test_the_head_without_a_system_prompt_or_without_tools() -> None:
    user = {"role": "user", "content": "hi"}
    tail = [S, *words("user\nhi"), E, *words("\n"), S, *words("assistant\n")]
    tools_json = json.dumps(TOOLS, sort_keys=True, separators=(",", ":"))
    assert tokens.render_chat([user], TOOLS) == [
        S, *words("system\n"), *words("\n# Tools\n" + tools_json), E, *words("\n"), *tail
    ]  # fmt: skip
    assert tokens.render_chat([user]) == tail
    developer = {"role": "developer", "content": "Rules."}
    assert tokens.render_chat([developer, user]) == [
        S, *words("system\nRules."), E, *words("\n"), *tail
    ]  # fmt: skip
    assert tokens.render_chat([]) == [S, *words("assistant\n")]


def test_content_that_is_neither_text_nor_parts_is_refused() -> None:
    with pytest.raises(TypeError, match="content must be a string or a list"):
        tokens.render_chat([{"role": "user", "content": 42}])


def test_parts_without_text_and_tool_calls_beside_content_are_rendered() -> None:
    call = [{"function": {"name": "f"}}]
    messages = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}},
                                     {"type": "text", "text": "what is this?"}]},
        {"role": "assistant", "content": "Looking.", "tool_calls": call},
    ]  # fmt: skip
    calls_json = json.dumps(call, sort_keys=True, separators=(",", ":"))
    assert tokens.render_chat(messages) == [
        S, *words("user\nwhat is this?"), E, *words("\n"),
        S, *words("assistant\nLooking." + calls_json), E, *words("\n"),
        S, *words("assistant\n"),
    ]  # fmt: skip
    with pytest.raises(TypeError, match=r"^content must be a string or a list of content parts$"):
        tokens.content_text(3.5)


def test_a_tokenizer_file_adds_no_special_tokens_and_a_missing_package_says_how_to_get_it(
    tmp_path, monkeypatch
) -> None:
    import sys

    import tokenizers
    from tokenizers import models, pre_tokenizers, processors

    tok = tokenizers.Tokenizer(models.WordLevel({"[UNK]": 0, "[CLS]": 1, "hi": 2},
                                                unk_token="[UNK]"))  # fmt: skip
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A", special_tokens=[
        ("[CLS]", 1)])  # fmt: skip
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    assert tokens.load_tokenizer(str(path))("hi") == [2]  # no [CLS]: the template adds its own
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(RuntimeError) as refused:
        tokens.load_tokenizer(str(path))
    assert str(refused.value) == (
        "--tokenizer needs the `tokenizers` package: pip install 'kvpin[tokenizer]'"
    )
