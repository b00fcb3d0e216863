from kvpin.sim import config


def test_bytes_per_token_of_a_llama_8b() -> None:
    # 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
    assert config.PROFILES["llama-3.1-8b"].bytes_per_token == 131_072


def test_capacity_from_bytes() -> None:
    profile = config.PROFILES["llama-3.1-8b"]
    assert config.capacity_blocks(512 * 2**20, profile, 16) == 256
    assert config.capacity_blocks(40 * 2**30, profile, 16) == 20_480
    assert config.capacity_blocks(2 * 2**20 - 1, profile, 16) == 0
    fp8 = config.ModelProfile(layers=32, kv_heads=8, head_dim=128, dtype_bytes=1)
    assert config.capacity_blocks(512 * 2**20, fp8, 16) == 512


def test_names_and_salt() -> None:
    c = config.SimConfig(model="m", served_model_names=("ep-a", "m"))
    assert c.names == ("ep-a", "m")
    assert config.SimConfig(model="m").names == ("m",)
    assert config.SimConfig(model="m").salt() != config.SimConfig(model="m", adapter="lora").salt()
    assert config.SimConfig(model="m").salt("tenant-a") != config.SimConfig(model="m").salt()
