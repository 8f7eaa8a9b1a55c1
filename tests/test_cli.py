"""The command line: what a rule runs, and the errors a person sees."""
import json
import subprocess
import sys


def intertwine(*args):
    return subprocess.run([sys.executable, "-m", "intertwine", *args], capture_output=True, text=True)


def test_missing_cifar_is_one_clear_error(tmp_path):
    block = {"dataset": "cifar10", "val_size": 10,
             "cifar10": {"root": str(tmp_path / "nowhere"), "layout": "auto", "download": False}}
    result = intertwine("data", "--config", json.dumps(block), "--out", str(tmp_path / "cache"))
    assert result.returncode != 0
    assert "intertwine data: error: no CIFAR-10 found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()


def test_train_refuses_an_existing_checkpoint_before_training(tmp_path):
    checkpoint = tmp_path / "seed0.pt"
    checkpoint.write_bytes(b"trained weights")
    result = intertwine("train", "--data", str(tmp_path / "no-data"), "--variant", "m", "--seed", "0",
                        "--spec", '{"arch": "myrtle"}', "--training", "{}",
                        "--checkpoint", str(checkpoint), "--metrics", str(tmp_path / "m.parquet"))
    assert result.returncode != 0 and "never overwritten" in result.stderr
    assert checkpoint.read_bytes() == b"trained weights"


def test_bad_json_names_the_argument(tmp_path):
    result = intertwine("data", "--config", "{not json", "--out", str(tmp_path))
    assert result.returncode == 2 and "--config" in result.stderr and "not valid JSON" in result.stderr
