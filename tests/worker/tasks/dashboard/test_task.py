"""The dashboard as a task: its cards, its prompt, and the personas task check plays."""

from __future__ import annotations

import pytest

from worker.profiles import PROFILES
from worker.tasks.dashboard.brief import make_brief
from worker.tasks.dashboard.checks import static_checks
from worker.tasks.dashboard.task import task as dashboard


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_prompt_says_what_the_load_checks_check(profile: str) -> None:
    prompt = dashboard.system_prompt(PROFILES[profile])
    # The load checks let a page link anywhere and refuse what it would fetch: the prompt
    # no longer forbids every URL, and says that nothing may be loaded
    assert "no external\n  URL of any kind" not in prompt and "URL of any kind" not in prompt
    assert "may link to\n  other pages" in prompt
    assert "must load nothing from the network" in prompt
    # and a credit link passes the checks the prompt describes, a CDN script does not
    credit = "<canvas></canvas><script>c.getContext('2d');requestAnimationFrame(f)</script>"
    linked = static_checks(credit + '<a href="https://example.com">made with care</a>')
    loaded = static_checks(credit + '<script src="https://cdn.example.com/x.js"></script>')
    assert all(c.passed for c in linked)
    assert [c.name for c in loaded if not c.passed] == ["no_external_url"]


def test_cards_are_public_and_stable() -> None:
    cards = dashboard.instances()
    assert len(cards) == 1000 and cards[7].id == "card-7"
    assert cards[7].public == make_brief(7) and cards[7].hidden == {}
    assert dashboard.instance("card-7") == cards[7]
    # a conversation's brief finds its card
    assert dashboard.instance_for(dashboard.instructions(cards[7])) == cards[7]
