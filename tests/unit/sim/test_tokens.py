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
