from kvpin import api


def test_ring_round_trips_through_status() -> None:
    ring = api.Ring.of(
        [api.RingMember("b-1", "10.0.0.2:8000"), api.RingMember("b-0", "10.0.0.1:8000")]
    )
    doc = ring.to_status()
    assert doc["members"][0]["name"] == "b-0"
    assert doc["size"] == 2
    assert api.Ring.from_status(doc) == ring
    assert api.Ring.from_status(doc).version == doc["version"]


def test_from_status_skips_broken_entries_and_tolerates_none() -> None:
    assert api.Ring.from_status(None) == api.Ring()
    doc = {"members": [{"name": "a"}, "junk", {"name": "b", "address": "1.2.3.4:1"}]}
    assert api.Ring.from_status(doc).members == (api.RingMember("b", "1.2.3.4:1"),)


def test_member_url() -> None:
    assert api.RingMember("p-0", "10.0.0.1:8000").url == "http://10.0.0.1:8000"
