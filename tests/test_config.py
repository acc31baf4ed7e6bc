import pytest

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.errors import ConfigError


def test_defaults_are_the_documented_weights():
    assert Settings().weights() == {
        "similarity": 0.50,
        "keywords": 0.15,
        "scope": 0.05,
        "confidence": 0.0,
        "recency": 0.0,
    }


def test_precedence_flag_over_env_over_file_over_default(cairn_home, monkeypatch):
    cairn_home.mkdir(parents=True, exist_ok=True)
    assert Settings().RANK_K == 5
    (cairn_home / "config.toml").write_text("RANK_K = 7\n")
    assert Settings().RANK_K == 7
    monkeypatch.setenv("CAIRN_RANK_K", "9")
    assert Settings().RANK_K == 9
    assert Settings(RANK_K=3).RANK_K == 3


def test_values_are_resolved_at_call_time(monkeypatch):
    s = Settings()
    monkeypatch.setenv("CAIRN_SCORE_W_RECENCY", "0.2")
    assert s.SCORE_W_RECENCY == 0.2


@pytest.mark.parametrize("var,value", [("CAIRN_RANK_K", "many"), ("CAIRN_RELEVANCE_PREFILTER_ENABLED", "maybe")])
def test_bad_values_name_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=var):
        Settings().RANK_K if "RANK" in var else Settings().RELEVANCE_PREFILTER_ENABLED


def test_broken_config_file_is_a_clear_error(cairn_home):
    cairn_home.mkdir(parents=True, exist_ok=True)
    (cairn_home / "config.toml").write_text("RANK_K = [\n")
    with pytest.raises(ConfigError, match=r"config\.toml is not valid TOML"):
        _ = Settings().RANK_K


def test_default_urls_are_sqlite_under_home(cairn_home):
    assert config.memory_db_url() == f"sqlite:///{cairn_home / 'memory.db'}"
    assert config.ephemeral_db_url("sqlite:///x.db") == "sqlite:///x.db"


def test_a_missing_runtime_dependency_is_an_error_naming_the_install_not_a_quiet_fallback(monkeypatch):
    import sys

    from cairn_cli.core import text
    from cairn_cli.errors import MissingDependency

    monkeypatch.setitem(sys.modules, "Stemmer", None)  # what a machine without PyStemmer sees
    text._stemmer.cache_clear()
    text.stem.cache_clear()
    try:
        with pytest.raises(MissingDependency, match="PyStemmer is not installed") as err:
            text.terms("running tests")
        assert "pip install" in err.value.one_line()
    finally:
        text._stemmer.cache_clear()
        text.stem.cache_clear()


def test_what_the_tests_run_with_is_what_an_install_gets():
    """PyStemmer is a runtime dependency of the package, not only of the test extra."""
    from importlib.metadata import requires

    runtime = [r for r in requires("cairn_cli") if "extra ==" not in r]
    assert any(r.lower().startswith("pystemmer") for r in runtime), runtime
