"""Placement by cost (router.placement): expected choices worked out by hand."""

import dataclasses
from collections.abc import Iterator

from kvpin.router import placement
from kvpin.router.placement import Candidate

S = placement.CostSettings(margin=0.25, margin_tokens=256)


def c(name: str, queued: float = 0, cached: int = 0, rate: float = 10_000) -> Candidate:
    return Candidate(name, queued, cached, rate)


def test_a_request_with_nothing_cached_takes_the_less_loaded_of_the_first_two() -> None:
    walk = [c("a", queued=5000), c("b", queued=1000), c("c", queued=0)]
    assert placement.decide(walk, None, 4000, S) == placement.Decision("b", False, True)
    even = [c("a"), c("b"), c("c")]
    assert placement.decide(even, None, 4000, S).member == "a"  # ties: walk order


def test_a_turn_whose_head_changed_takes_the_least_loaded_of_all() -> None:
    # a careless client's timestamp in its system prompt: nothing held, a new key every turn
    walk = [c("a", queued=5000), c("b", queued=1000), c("c", queued=0)]
    changed = placement.decide(walk, None, 4000, S, head_changed=True)
    assert changed == placement.Decision("c", False, True)
    even = [c("a"), c("b"), c("c")]
    assert placement.decide(even, None, 4000, S, head_changed=True).member == "a"  # walk order
    # a member still holding part of it (its tools changed, its system prompt did not) has
    # that much less work
    walk = [c("a", queued=900), c("b", queued=1000, cached=600), c("c", queued=500)]
    assert placement.decide(walk, None, 4000, S, head_changed=True).member == "b"


def test_a_new_conversation_whose_two_choices_both_have_a_queue_takes_the_least_loaded() -> None:
    # a burst: both of its two choices have a request waiting for its first token, and a
    # third member is idle; two choices among four collide, so it widens to every member
    burst = [
        dataclasses.replace(c("a", queued=3000), waiting=1),
        dataclasses.replace(c("b", queued=2000), waiting=2),
        c("c", queued=0),
    ]
    assert placement.decide(burst, None, 4000, S) == placement.Decision("c", False, True)
    # one of the two has nothing waiting (work running, none queued): the two choices hold
    calm = [burst[0], dataclasses.replace(burst[1], waiting=0), burst[2]]
    assert placement.decide(calm, None, 4000, S).member == "b"
    # both waiting, the third busier still: the less loaded of the first two, as before
    busy = [*burst[:2], c("c", queued=5000)]
    assert placement.decide(busy, None, 4000, S).member == "b"
    # it widens over its own walk only: a popular head's conversations are kept on the head's
    # first members (fresh_order holds only those), and a burst does not copy the head further
    fresh = placement.CostSettings(fresh_below=0.3)
    assert placement.decide(burst, None, 4000, fresh, ["b", "a"]).member == "b"
    assert placement.decide(burst, None, 4000, fresh, ["b", "a", "c"]).member == "c"


def test_a_request_finding_only_a_short_shared_head_is_placed_by_its_conversation() -> None:
    fresh = placement.CostSettings(margin=1, fresh_below=0.3)
    # the head (1,000 of 4,000 tokens: a quarter) is on a; the conversation's own walk is c, b
    walk = [c("a", cached=1000), c("b", queued=500), c("c", queued=400)]
    chosen = placement.decide(walk, "a", 4000, fresh, fresh_order=["c", "b", "a"])
    assert chosen == placement.Decision("c", moved=False, fresh=True)  # c: the first two's less
    loaded = [c("a", cached=1000), c("b", queued=500), c("c", queued=501)]
    assert placement.decide(loaded, "a", 4000, fresh, ["c", "b", "a"]).member == "b"
    # of the two, one holding some of it has that much less to do; rates do not count
    # (each replica measures its own, and replicas seeing the same loads must agree)
    partial = [c("a", cached=1000), c("b", queued=500, cached=200, rate=1), c("c", queued=400)]
    assert placement.decide(partial, "a", 4000, fresh, ["c", "b", "a"]).member == "b"
    # more than the fraction held: the cost rule, which keeps it with the holder
    assert placement.decide(walk, "a", 3000, fresh, ["c", "b", "a"]).member == "a"
    # nothing held anywhere: the same; members off the conversation's walk follow in walk order
    cold = [c("a", queued=100), c("b", queued=50), c("c", queued=60)]
    assert placement.decide(cold, None, 4000, fresh, ["c", "b", "a"]).member == "b"
    assert placement.decide(cold, None, 4000, fresh, ["b"]).member == "b"
    assert placement.decide(cold, None, 4000, fresh, ["x"]).member == "b"  # a, b: b
    # exactly the fraction held is still new; just over it is not (1,000 of 3,333)
    assert placement.decide(walk, "a", 3333, fresh, ["c"]).fresh is False
    edge = [c("a", cached=300), c("b", queued=500), c("c", queued=400)]
    assert placement.decide(edge, "a", 1000, fresh, ["c", "b", "a"]).member == "c"
    # a fraction of 0: only requests with nothing held are new, as before the fraction
    zero = placement.CostSettings(fresh_below=0)
    assert placement.decide(walk, "a", 4000, zero).member == "a"
    assert placement.decide(cold, None, 4000, zero) == placement.Decision("b", False, True)


def test_a_request_holding_nothing_beyond_its_system_prompt_and_tools_is_new() -> None:
    fresh = placement.CostSettings(margin=1, fresh_below=0.3)
    # a 3,000-token system prompt of a 4,000-token first turn, held on a: far over the
    # fraction, but none of the conversation is held anywhere
    walk = [c("a", queued=900, cached=3000), c("b", queued=500), c("c", queued=400)]
    head = placement.decide(walk, "a", 4000, fresh, ["c", "b", "a"], head_tokens=3000)
    assert head == placement.Decision("c", moved=False, fresh=True)
    # the head holder among the first two has no less to do by holding it: by queue alone
    assert placement.decide(walk, "a", 4000, fresh, ["b", "a"], head_tokens=3000).member == "b"
    assert placement.decide(walk, "a", 4000, fresh, ["a", "b"], head_tokens=3100).member == "b"
    # what it holds beyond the head (a tenth of it here) still counts
    beyond = [c("a", queued=900, cached=3000), c("b", queued=500)]
    assert placement.decide(beyond, "a", 10_000, fresh, ["b", "a"], head_tokens=2500).member == (
        "a")  # fmt: skip
    # a token of the conversation held: the cost rule, which keeps it with the holder
    assert placement.decide(walk, "a", 4000, fresh, ["c"], head_tokens=2999).member == "a"
    # a fraction of 0 turns this off too
    zero = placement.CostSettings(margin=1, fresh_below=0)
    assert placement.decide(walk, "a", 4000, zero, ["c"], head_tokens=3000).member == "a"


def test_a_warm_home_is_kept_against_a_small_imbalance() -> None:
    # home: 40k cached of 41k, 8k queued -> (8000 + 1000) / 10k = 0.9 s
    # cold b: nothing queued -> 41000 / 10k = 4.1 s: staying is far cheaper
    walk = [c("b"), c("home", queued=8000, cached=40_000)]
    assert placement.decide(walk, "home", 41_000, S).member == "home"


def test_a_home_buried_in_work_loses_to_a_member_ahead_by_more_than_the_margin() -> None:
    # home (60000 + 1000) / 10k = 6.1 s; b 41000 / 10k = 4.1 s;
    # margin (0.25 x 40000 recomputed + 256) / 10k = 1.03 s: 4.1 < 6.1 - 1.03 -> move
    walk = [c("b"), c("home", queued=60_000, cached=40_000)]
    assert placement.decide(walk, "home", 41_000, S) == placement.Decision("b", True, False)
    # home (49000 + 1000) / 10k = 5.0 s: 4.1 > 5.0 - 1.03 -> stay
    close = [c("b"), c("home", queued=49_000, cached=40_000)]
    assert placement.decide(close, "home", 41_000, S).member == "home"


def test_a_move_onto_a_member_with_requests_waiting_pays_for_their_wait_too() -> None:
    # the move above (b idle: 4.1 s against home's 6.1 - 1.03) with one request waiting on b:
    # b's 41k of prefill delays the request queued behind it by 4.1 s -> 8.2 s: stay
    busy = [Candidate("b", 0, 0, 10_000, waiting=1), c("home", queued=60_000, cached=40_000)]
    assert placement.decide(busy, "home", 41_000, S).member == "home"
    # what leaving would spare the requests waiting on the home is not counted: 40 waiting
    # there do not make a move of it; a home 10 s behind (10.1 > 8.2 + 1.03) does
    home = [busy[0], Candidate("home", 60_000, 40_000, 10_000, waiting=40)]
    assert placement.decide(home, "home", 41_000, S).member == "home"
    buried = [busy[0], dataclasses.replace(home[1], queued_tokens=100_000)]
    assert placement.decide(buried, "home", 41_000, S) == placement.Decision("b", True, False)
    # of two members ahead, the one fewer requests wait behind is taken, not the quicker one
    two = [Candidate("b", 0, 0, 10_000, waiting=2), Candidate("d", 2000, 0, 10_000),
           c("home", queued=60_000, cached=40_000)]  # fmt: skip
    assert placement.decide(two, "home", 41_000, S).member == "d"


def test_a_move_pays_for_the_requests_arriving_while_it_recomputes() -> None:
    # the move above (b idle: 4.1 s against home's 6.1 - 1.03): at 0.2 requests a second
    # expected on b, 0.82 arrive over b's 4.1 s of prefill and wait 2.05 s each on average:
    # 4.1 + 1.68 = 5.78 s > 5.07 -> stay; at 0.05 a second 4.1 + 0.42 = 4.52 s -> move
    def walk(arrivals: float) -> list[Candidate]:
        return [Candidate("b", 0, 0, 10_000, arrivals=arrivals),
                Candidate("home", 60_000, 40_000, 10_000, arrivals=arrivals)]  # fmt: skip

    assert placement.decide(walk(0.2), "home", 41_000, S).member == "home"
    assert placement.decide(walk(0.05), "home", 41_000, S).member == "b"
    # quadratic in what is recomputed: a short head (1300 of 1500 tokens, 0.15 s on b) still
    # leaves a holder 0.3 s behind at the same 0.2 a second (0.15 + 0.002 < 0.32 - 0.058)
    short = [Candidate("holder", 3000, 1300, 10_000, arrivals=0.2),
             Candidate("b", 0, 0, 10_000, arrivals=0.2)]  # fmt: skip
    assert placement.decide(short, "holder", 1500, S).member == "b"
    assert short[1].cost(1500) == 0.15 + 0.15 * 0.2 * 0.15 / 2


def test_by_default_a_move_must_save_five_times_what_it_recomputes() -> None:
    # 5,000 tokens held at home behind 25,000 queued (one long prefill), b idle: moving
    # recomputes 0.5 s to save 2 s (2.6 s at home, 0.6 s on b), four times: stay. Behind
    # 40,000 it saves 3.5 s, seven times: move (margin (5 x 5000 + 256) / 10k = 2.53 s)
    default = placement.CostSettings()
    walk = [c("b"), c("home", queued=25_000, cached=5_000)]
    assert placement.decide(walk, "home", 6000, default).member == "home"
    walk = [c("b"), c("home", queued=40_000, cached=5_000)]
    assert placement.decide(walk, "home", 6000, default) == placement.Decision("b", True, False)


def test_on_a_saturated_pool_a_request_leaves_home_only_for_as_much_held() -> None:
    # the move above (4.1 s against home's 6.1 - 1.03): on a saturated pool it would copy the
    # 40k held into b's cache while every member has requests queued: stay
    walk = [c("b"), c("home", queued=60_000, cached=40_000)]
    assert placement.decide(walk, "home", 41_000, S, saturated=True).member == "home"
    # a member holding as much is still taken when ahead (only queueing is spared)
    same = [c("b"), c("d", cached=40_000), c("home", queued=60_000, cached=40_000)]
    assert placement.decide(same, "home", 41_000, S, saturated=True) == placement.Decision(
        "d", True, False
    )
    # new conversations are placed as before
    fresh = [c("b", queued=5000), c("home")]
    assert placement.decide(fresh, None, 41_000, S, saturated=True).member == "home"


def test_a_pool_is_saturated_when_every_candidate_has_two_waiting() -> None:
    assert placement.saturated([2, 3, 2])
    assert not placement.saturated([2, 1, 5])
    assert not placement.saturated([2.0, 1.5])  # other replicas' waiting, read off a scrape


def test_a_short_shared_head_is_left_for_a_member_with_less_queued() -> None:
    # holder (1500 + 200) / 10k = 0.17 s; b 1500 / 10k = 0.15 s;
    # margin (0.25 x 1300 + 256) / 10k = 0.058 s: 0.15 > 0.112 -> stay
    walk = [c("holder", queued=1500, cached=1300), c("b")]
    assert placement.decide(walk, "holder", 1500, S).member == "holder"
    # holder with 3000 queued: 0.32 s; 0.15 < 0.26 -> b
    walk = [c("holder", queued=3000, cached=1300), c("b")]
    assert placement.decide(walk, "holder", 1500, S).member == "b"


def test_a_move_between_members_holding_the_same_prefix_needs_only_the_hysteresis() -> None:
    # owner (500 + 2000) / 10k = 0.25 s, y (0 + 2000) / 10k = 0.2 s; nothing recomputed:
    # margin 256 / 10k = 0.0256 s -> y
    walk = [c("owner", queued=500, cached=3000), c("x"), c("y", cached=3000)]
    assert placement.decide(walk, None, 5000, S) == placement.Decision("y", True, False)
    walk = [c("owner", queued=200, cached=3000), c("x"), c("y", cached=3000)]
    assert placement.decide(walk, None, 5000, S).member == "owner"


def test_rates_weigh_members_differently() -> None:
    slow_home = c("home", queued=0, cached=10_000, rate=1_000)  # 10 s for 10k uncached
    fast = c("fast", rate=100_000)  # 0.2 s for all 20k
    assert placement.decide([slow_home, fast], "home", 20_000, S).member == "fast"


def tokens(chars: int) -> int:
    return chars // 4  # 4 characters a token


def holders(
    walk: list[str], chars: dict[str, int], prompt: int = 10_000, previous: int = 0,
    order: tuple[str, ...] = (), *, last: str | None = None, sent: int = 0, lost: bool = False,
):  # fmt: skip
    return placement.holders(walk, chars, prompt_tokens=prompt, previous_tokens=previous,
                             tokens=tokens, slack_chars=4096, order=order, last=last,
                             sent_chars=sent, lost=lost)  # fmt: skip


def test_the_home_is_the_first_member_of_the_walk_holding_the_longest_prefix() -> None:
    home, cached = holders(["a", "b", "c"], {"c": 8192, "b": 8192, "a": 4096})
    assert home == "b"  # b and c hold as much; b comes first in the walk
    assert cached == {"a": 1024, "b": 2048, "c": 2048}
    assert holders(["a", "b"], {}) == (None, {})
    assert holders(["a", "b"], {"a": 0}) == (None, {})  # holding nothing is no home


def test_a_member_off_the_walk_is_no_home_and_what_it_holds_counts_nowhere() -> None:
    # a (tried or ejected) holds the longest prefix: no home, the request goes as one without
    home, cached = holders(["b", "c"], {"a": 40_960, "c": 4096})
    assert (home, cached) == (None, {"c": 1024})
    assert holders(["b", "c"], {"a": 4096, "c": 4096}) == ("c", {"c": 1024})


def test_what_a_member_holds_never_exceeds_the_prompt() -> None:
    assert holders(["a"], {"a": 80_000}, prompt=5000)[1] == {"a": 5000}


def test_of_several_holding_a_shared_head_the_conversation_walk_picks_the_home() -> None:
    # b and c hold as much (a system prompt): the conversation's walk, not the key's, decides
    assert holders(["a", "b", "c"], {"b": 8192, "c": 8192}, order=("c", "a", "b"))[0] == "c"
    assert holders(["a", "b", "c"], {"b": 8192, "c": 8192}, order=("b", "c"))[0] == "b"
    # members of the order off the walk (tried, ejected) are passed over
    assert holders(["b", "c"], {"a": 8192, "b": 8192, "c": 8192}, order=("a", "c"))[0] == "c"
    # one member holding the longest prefix is the home wherever the walk puts it
    assert holders(["a", "b", "c"], {"b": 8192, "c": 4096}, order=("c", "a"))[0] == "b"


def reading(names: str, read: list[str]) -> Iterator[str]:
    """A lazy walk over `names` that notes each member read."""
    for name in names:
        read.append(name)
        yield name


def test_the_conversation_walk_is_read_only_as_far_as_needed() -> None:
    read: list[str] = []
    assert (
        holders(["a", "b", "c", "d"], {"a": 8192, "b": 8192}, order=reading("cbad", read))[0] == "b"
    )
    assert read == ["c", "b"]
    read.clear()
    assert holders(["a", "b", "c", "d"], {"a": 8192}, order=reading("cbad", read))[0] == "a"
    assert read == []  # one holder: nothing to read


def test_a_turn_another_replica_placed_is_presumed_on_its_conversation_walk() -> None:
    # the first member of its walk on the key's walk, where a new conversation goes when
    # loads are even
    home, cached = holders(["a", "b", "c"], {}, previous=6000, order=("x", "c", "a"))
    assert home == "c" and cached == {"c": 6000}
    # its head or an earlier turn known on b: the same, as every other replica presumes
    home, cached = holders(["a", "b", "c"], {"b": 8192, "c": 8192}, previous=6000,
                           order=("a", "c", "b"))  # fmt: skip
    assert home == "a" and cached == {"a": 6000, "b": 2048, "c": 2048}
    # no conversation walk: the key's
    assert holders(["a", "b"], {"b": 8192}, previous=6000) == ("a", {"a": 6000, "b": 2048})
    # within a chunk of what is known: only the chunking, not another replica's turn
    assert holders(["a", "b"], {"b": 8192}, previous=3072) == ("b", {"b": 2048})
    # known on a member off the walk: no presumption either
    assert holders(["b"], {"a": 24_576}, previous=6000) == (None, {})


def test_a_turn_this_replica_sent_where_the_cache_is_gone_is_presumed_nowhere() -> None:
    # its member left or restarted: what the index says of the others is all there is
    head = {"b": 8192, "c": 8192}
    assert holders(["a", "b", "c"], head, previous=6000, order=("c", "b"), last="a",
                   lost=True) == ("c", {"b": 2048, "c": 2048})  # fmt: skip
    assert holders(["a", "b"], {}, previous=6000, last="x", lost=True) == (None, {})
    # a short tail on a member back at a new address (same name, in the walk): not believed
    assert holders(["a", "b"], {}, previous=500, last="a", lost=True) == (None, {})


def test_a_turn_whose_tail_the_index_cannot_see_stays_where_its_previous_turn_went() -> None:
    # b and c hold the head (8192 characters, 2048 tokens); the previous prompt is 2500
    # tokens: its tail is under a chunk (the slack), which the index does not name
    head = {"b": 8192, "c": 8192}
    home, cached = holders(["a", "b", "c"], head, previous=2500, order=("c", "b"), last="b")
    assert home == "b" and cached == {"b": 2500, "c": 2048}
    # not knowing where it went: the conversation's walk picks among the head's holders
    assert holders(["a", "b", "c"], head, previous=2500, order=("c", "b"))[0] == "c"
    # the index dropped more of it from b than a chunk: evicted, by its guess; not believed
    home, cached = holders(["a", "b", "c"], {"b": 4096, "c": 8192}, previous=2500,
                           order=("c", "b"), last="b")  # fmt: skip
    assert home == "c" and cached == {"b": 1024, "c": 2048}
    # b tried or ejected (off the walk): not believed either
    assert holders(["a", "c"], head, previous=2500, order=("c",), last="b")[0] == "c"
    # a new conversation or a broken prefix (no previous prompt): nothing to follow
    assert holders(["a", "b", "c"], head, order=("c", "b"), last="b")[0] == "c"
    # all of it named in the index already (here on c, a retry's member): the index says where
    assert holders(["a", "b", "c"], {"b": 8192, "c": 12_288}, previous=2500, order=("b",),
                   last="b") == ("c", {"b": 2048, "c": 3072})  # fmt: skip


def test_estimates_and_decisions_are_exact() -> None:
    assert c("a", queued=1000, cached=500).ttft(500) == 0.1  # all cached: only the queue
    assert c("a", queued=0, cached=800).ttft(500) == 0.0  # never negative work
    assert c("a", queued=1000, cached=0, rate=2000).ttft(1000) == 1.0
    walk = [c("b"), c("home", queued=8000, cached=40_000)]
    assert placement.decide(walk, "home", 41_000, S) == placement.Decision("home", False, False)


def test_a_move_must_be_strictly_better_than_the_margin() -> None:
    # rate 1 token/s, so seconds are tokens: b (nothing cached) 2000; home holds the whole
    # 2000-token prompt with Q queued: Q. Margin 0.25 x 2000 recomputed + 256 = 756.
    # Move iff 2000 < Q - 756, i.e. Q > 2756.
    def walk(queued: int) -> list[Candidate]:
        return [c("home", queued=queued, cached=2000, rate=1), c("b", rate=1)]

    assert placement.decide(walk(2756), "home", 2000, S) == placement.Decision("home", False, False)
    assert placement.decide(walk(2757), "home", 2000, S) == placement.Decision("b", True, False)


def test_holders_default_to_nothing_known() -> None:
    # nothing known anywhere: a previous prompt of one chunk's worth is no sign of another
    # replica (the slack), two chunks' worth is
    assert holders(["a", "b"], {}, previous=1024) == (None, {})
    assert holders(["a", "b"], {}, previous=1025) == ("a", {"a": 1025})
    home, cached = holders(["a", "b"], {"a": 4096}, previous=5000)
    assert (home, cached) == ("a", {"a": 5000})  # what it holds, raised to the previous prompt


def test_a_turn_this_replica_sent_is_not_presumed_on_the_first_member_of_the_walk() -> None:
    head = {"a": 8192, "b": 8192}  # a head of 2048 tokens on a and b
    # the turn before went to b, 9000 characters; with its answer it is 3500 tokens, past
    # what the index names on b and the slack (12,288 characters, 3072 tokens)
    home, cached = holders(["a", "b", "c"], head, previous=3500, last="b", sent=9000)
    assert (home, cached) == ("b", {"a": 2048, "b": 3500})
    # where another replica sent the turn before (the size of none is known): presumed on a
    assert holders(["a", "b", "c"], head, previous=3500, last="b")[0] == "a"
    # the index trimmed it from b (the engine evicted it, by its guess): not believed, and
    # not presumed whole on a member it never went to; of the head's holders, b
    home, cached = holders(["a", "b", "c"], head, previous=4200, last="b", sent=16_000)
    assert (home, cached) == ("b", {"a": 2048, "b": 2048})
    home, cached = holders(["a", "b", "c"], {"a": 8192, "b": 4096}, previous=4200, last="b",
                           sent=16_000)  # fmt: skip
    assert (home, cached) == ("a", {"a": 2048, "b": 1024})
    # all of it named on c already (a retry's member): the index says where
    home, cached = holders(["a", "b", "c"], {**head, "c": 16_384}, previous=3500, last="b",
                           sent=9000)  # fmt: skip
    assert home == "c"


def test_members_that_opened_more_than_their_share_of_new_conversations_are_full() -> None:
    openings = placement.Openings(window=8)
    assert openings.full(4) == set()
    for member in "aaab":
        openings.add(member)
    assert openings.full(4) == {"a"}  # the next is the fifth: a share of 1.25, and one more
    for member in "bcd":
        openings.add(member)
    assert openings.full(4) == {"a"}  # the eighth: 2 each, and one more; a has 3
    openings.add("b")
    assert openings.full(4) == set()  # the ninth: 2.25, and one more
    openings.add("c")  # the first "a" leaves the window: a 2, b 3, c 2, d 1
    assert openings.full(4) == set()
    assert openings.full(8) == {"b"}  # a pool of eight: 1.125, and one more
    assert openings.full(2) == set()


def test_a_heads_share_of_new_conversations_is_counted_over_a_window() -> None:
    demand = placement.Demand(window=4, floor=2)
    assert demand.share("h") == 0
    demand.add("h")
    assert demand.share("h") == 0.5  # one of at least `floor`
    for head in ("h", "g", "h"):
        demand.add(head)
    assert (demand.share("h"), demand.share("g")) == (0.75, 0.25)
    demand.add("g")  # the first "h" leaves the window
    assert (demand.share("h"), demand.share("g")) == (0.5, 0.5)
    for _ in range(4):
        demand.add("x")
    assert (demand.share("h"), demand.share("g"), demand.share("x")) == (0, 0, 1)
    assert len(demand._counts) == 1  # heads gone from the window are not kept


def test_a_head_is_spread_over_members_in_proportion_to_its_share() -> None:
    assert placement.head_members(1.0, 4) == 4
    assert placement.head_members(0.5, 4) == 2
    assert placement.head_members(0.6, 4) == 2
    assert placement.head_members(0.63, 4) == 3
    assert placement.head_members(0.37, 4) == 1  # under a member and a half's worth: one
    assert placement.head_members(0.375, 4) == 2
    assert placement.head_members(1 / 6, 4) == 1
    assert placement.head_members(0.0, 4) == 1  # never none
    assert placement.head_members(2.0, 4) == 4  # never more than the pool
    assert placement.head_members(0.3, 10) == 3


def test_how_new_conversations_opening_like_a_request_are_placed() -> None:
    def new(head: int, first: int, share: float, fresh_below: float = 0.3) -> tuple[bool, int]:
        return placement.new_conversations(
            head_tokens=head, first_tokens=first, share=share, members=4, fresh_below=fresh_below
        )

    # no head, or a head that is a small part of the first turn: by its own walk, over all
    assert new(0, 100, 1.0) == (True, 4)
    assert new(30, 100, 1 / 6) == (True, 4)  # exactly the fraction: still small
    # a head that is most of the first turn: as its popularity says
    assert new(31, 100, 1 / 6) == (False, 1)  # with its holders, by the key's walk
    assert new(31, 100, 0.5) == (True, 2)
    assert new(900, 1000, 1.0) == (True, 4)
    # a fraction of 0: the key's walk for every request, as before the fraction
    assert new(0, 100, 1.0, fresh_below=0) == (False, 4)
    assert new(900, 1000, 1.0, fresh_below=0) == (False, 4)


def test_demand_counts_the_last_256_heads_and_at_least_8() -> None:
    demand = placement.Demand()
    demand.add("h")
    assert demand.share("h") == 1 / 8
    for _ in range(255):
        demand.add("x")
    assert demand.share("h") == 1 / 256
    demand.add("x")
    assert demand.share("h") == 0


def test_a_new_conversation_reads_only_the_first_two_members_of_its_walk() -> None:
    read: list[str] = []
    fresh = placement.CostSettings(fresh_below=0.3)
    walk = [c("a"), c("b"), c("c")]
    assert placement.decide(walk, None, 4000, fresh, reading("cxba", read)).member == "c"
    assert read == ["c", "x", "b"]  # x is not a candidate (tried, ejected): passed over


def test_a_trimmed_run_counts_for_part_of_its_length_after_the_held_run() -> None:
    held, trimmed = {"a": 2, "b": 4}, {"a": 6, "c": 3}
    assert placement.believed(held, {}) == held
    assert placement.believed(held, trimmed) == {
        "a": 2 + 6 * placement.SATURATED_TRIMMED,
        "b": 4,
        "c": 3 * placement.SATURATED_TRIMMED,
    }
