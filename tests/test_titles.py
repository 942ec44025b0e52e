"""Plan-title normalization: request sentences become the title they name."""

from __future__ import annotations

import pytest

from parley.activities.toolsets.titles import ELLIPSIS, normalize_plan_title

# (what the model passed as the title, the title the plan gets)
REQUESTS = [
    ("帮我创建一个计划，标题是季度复盘", "季度复盘"),
    ("please create a plan called Q3 review for next week", "Q3 review"),
    ("请帮我新建一个计划，名字叫“客户回访”，下周五之前完成", "客户回访"),
    ("帮我建一个叫季度复盘的计划", "季度复盘"),
    ('Can you create a plan named "Launch v2"?', "Launch v2"),
    ("Create a plan for the website redesign by Friday", "website redesign"),
    ("请创建计划：2024年度预算", "2024年度预算"),
    ("帮我制定一个学习Python的计划", "学习Python"),
    ("I'd like to make a new plan titled 'Onboarding revamp', due next month", "Onboarding revamp"),
    ("帮我做一个下周的健身计划", "健身计划"),
    ("新建计划 标题为《产品路线图》", "产品路线图"),
    ("麻烦帮我新建一个名为「服务器迁移」的计划，月底前完成", "服务器迁移"),
    ("Could you please set up a plan named Customer onboarding v2 by next Friday?",
     "Customer onboarding v2"),
    ("我想创建一个关于团队建设的计划", "团队建设"),
    ("let's create a plan called 'Q3 review'", "Q3 review"),
    ("Make a marketing plan for tomorrow", "marketing plan"),
    ("title: Budget 2025", "Budget 2025"),
    ("Create a plan called Q3 review. It should cover revenue.", "Q3 review"),
    ("「年终总结」", "年终总结"),
    ("  Weekly   sync  ", "Weekly sync"),
]  # fmt: skip

# Already titles: returned exactly as given.
CLEAN = [
    "Q3 review",
    "季度复盘",
    "Plan for next week",
    "请假制度梳理",
    'Review "Project X" launch',
    "Set up CI for the web repo",  # not a plan request, though it starts with a verb
    "2024 年度预算",
]


@pytest.mark.parametrize(("given", "expected"), REQUESTS)
def test_request_sentences_become_the_title_they_name(given: str, expected: str) -> None:
    result = normalize_plan_title(given)
    assert result.title == expected
    assert result.original == given
    assert result.changed


@pytest.mark.parametrize("given", CLEAN)
def test_clean_titles_stay_unchanged(given: str) -> None:
    result = normalize_plan_title(given)
    assert result.title == given
    assert not result.changed


def test_overlong_english_title_is_cut_at_a_word_boundary() -> None:
    given = (
        "Migrate the billing service from the legacy monolith to the new event-driven "
        "architecture with zero downtime and a full audit trail"
    )
    result = normalize_plan_title(given)
    assert len(result.title) <= 80
    assert result.title.endswith(ELLIPSIS)
    assert given.startswith(result.title[:-1])
    assert given[len(result.title) - 1] == " "  # the cut fell between words
    assert result.changed and result.original == given


def test_overlong_chinese_title_is_cut_hard() -> None:
    given = "新一代数据平台建设与迁移" * 10
    result = normalize_plan_title(given, max_length=20)
    assert result.title == given[:19] + ELLIPSIS


def test_a_request_that_names_no_title_falls_back_to_the_sentence() -> None:
    for given in ("please create a plan", "帮我创建一个计划"):
        result = normalize_plan_title(given)
        assert result.title == given
        assert not result.changed


def test_quoted_title_is_kept_verbatim_even_with_time_words() -> None:
    assert normalize_plan_title('create a plan called "Plan for next week"').title == (
        "Plan for next week"
    )


def test_never_empty() -> None:
    assert normalize_plan_title('""').title == '""'
    assert normalize_plan_title("。").title == "。"
    with pytest.raises(ValueError):
        normalize_plan_title("   ")
