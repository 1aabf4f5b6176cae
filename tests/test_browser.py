"""The Space in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

The page loads, every tab renders (plots drawn) without console errors, and a person plays a
whole game by clicking and typing. A screenshot of each tab goes to ``assets/screenshots/``
(the README shows them). Skipped only where Chromium or Playwright is not installed; ``.ci/run``
installs both.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt install chromium)")]

SHOTS = Path(__file__).resolve().parent.parent / "assets" / "screenshots"
TABS = {"At a glance": 2, "Out-haggle it": 0, "Play": 0, "GPU market": 2, "Evaluation": 3, "Training": 4,
        "Before vs after": 0, "Environment": 0, "Artifacts": 0, "API": 0}  # tab -> plotly figures it must draw
NARROW_PLOTS = {"GPU market": 0, "Evaluation": 1, "Training": 1}  # at a phone's width: the many-panel charts left out
# an absolute filesystem path in page text (a checkout's folder, the interpreter's): commands are shown relative
ABSOLUTE = re.compile(r"(?:^|[\s\"'`(=\[])/(?:home|root|work|tmp|usr|opt|var|mnt|srv|private|Users)/")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def page(space_url):
    with sync_api.sync_playwright() as p:  # launch() gives the browser a fresh temporary profile
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        pg.errors = []
        pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: pg.errors.append(str(e)))
        pg.goto(space_url, wait_until="load", timeout=60_000)
        pg.get_by_role("tab", name="Play").wait_for(timeout=60_000)
        yield pg
        browser.close()


def visible_plots(page) -> int:
    return sum(1 for el in page.locator(".js-plotly-plot").all() if el.is_visible())


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    page.get_by_role("tab", name=name, selected=True).wait_for(timeout=30_000)


def pick(page, dropdown: str, option: str) -> None:
    """Choose ``option`` in the dropdown whose element id is ``dropdown``."""
    page.locator(f"#{dropdown} input").click()
    page.get_by_role("option", name=option, exact=True).click()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{re.sub(r'[^a-z]+', '-', name.lower()).strip('-')}.png"), full_page=True)


def test_every_tab_renders_its_plots_without_console_errors(page):
    for name, plots in TABS.items():
        if name in ("Play", "GPU market"):
            if name == "GPU market":
                open_tab(page, name)
                page.wait_for_function("""() => [...document.querySelectorAll('.js-plotly-plot')]
                    .filter(e => e.offsetParent !== null && e.querySelector('.main-svg')).length >= 2""",
                                       timeout=30_000)
                assert visible_plots(page) >= 2
            continue  # screenshots after a game (tests below)
        open_tab(page, name)
        if plots:
            page.wait_for_function(f"""() => [...document.querySelectorAll('.js-plotly-plot')]
                .filter(e => e.offsetParent !== null && e.querySelector('.main-svg')).length >= {plots}""",
                                   timeout=30_000)
        if name == "Environment":  # the SFT sample is rebuilt with the trainer's code on first view
            page.locator("#sft-sample").get_by_text("Thought:").first.wait_for(timeout=120_000)
        if name == "Before vs after":
            page.locator("#ba-summary").get_by_text("ceiling").first.wait_for(timeout=30_000)
        assert visible_plots(page) >= plots, f"{name}: expected {plots} plots"
        shot(page, name)
    assert page.errors == [], f"console errors: {page.errors}"


def test_a_person_plays_a_whole_game_by_clicking_and_typing(page):
    open_tab(page, "Play")
    page.locator("#start-game").click()
    card = page.locator("#game-card")
    card.get_by_text("Your budget (private)").wait_for(timeout=30_000)
    budget = float(re.search(r"Your budget \(private\): \$([\d,]+\.\d\d)", card.inner_text()).group(1).replace(",", ""))
    outcome = page.locator("#game-outcome")
    for k in range(10):
        if "reward" in outcome.inner_text():
            break
        before = page.locator("#game-chat .message").count()
        price = page.locator("#human-price input")
        price.fill(f"{budget * (0.6 + 0.06 * k):.2f}")
        price.press("Tab")  # commit the value before the click reads it
        page.locator("#human-talk textarea").fill(f"Would you take this? (offer {k + 1})")
        page.locator("#human-talk textarea").press("Tab")
        page.locator("#human-send").click()
        # done when the seller has answered (last message is theirs), the game is over, or a move was refused
        page.wait_for_function(f"""() => {{
            if (document.querySelector('#game-outcome').innerText.includes('reward')) return true;
            if (document.querySelector('.toast-body')) return true;
            const m = [...document.querySelectorAll('#game-chat .message')];
            return m.length > {before} && m[m.length - 1].innerText.includes('seller:');
        }}""", timeout=30_000)
        toast = page.locator(".toast-body")
        assert toast.count() == 0, f"the app refused the move: {toast.first.inner_text()}"
    assert "reward" in outcome.inner_text(), "the game did not end within 10 moves"
    text = page.locator("#game-chat").inner_text()
    assert "Would you take this? (offer 1)" in text and "seller" in text
    assert "private reasoning" in text, "the seller's reasoning is revealed once the game is over"
    shot(page, "Play")
    assert page.errors == [], f"console errors: {page.errors}"


def test_two_visitors_play_separate_games(page, space_url):
    """A second visitor (its own browser context) starts and plays a game; the first visitor's game
    is untouched, and neither page shows the other's messages."""
    other = page.context.browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    other.goto(space_url, wait_until="load", timeout=60_000)
    pages = {"first": page, "second": other}
    for pg, seed in ((page, "11"), (other, "12")):
        open_tab(pg, "Play")
        pg.locator("#seed textarea").fill(seed)
        pg.locator("#seed textarea").press("Tab")
        pg.locator("#start-game").click()
        pg.locator("#game-card").get_by_text(f"seed {seed}").wait_for(timeout=30_000)
    for name, pg in pages.items():
        pg.locator("#human-price input").fill("1.00")
        pg.locator("#human-price input").press("Tab")
        pg.locator("#human-talk textarea").fill(f"hello from the {name} visitor")
        pg.locator("#human-talk textarea").press("Tab")
        pg.locator("#human-send").click()
        pg.locator("#game-chat").get_by_text(f"hello from the {name} visitor").wait_for(timeout=30_000)
    assert "second visitor" not in page.locator("#game-chat").inner_text()
    assert "first visitor" not in other.locator("#game-chat").inner_text()
    assert "seed 11" in page.locator("#game-card").inner_text() and "seed 12" in other.locator("#game-card").inner_text()
    other.context.close()


def test_a_market_game_by_the_expert_and_by_a_person(page):
    open_tab(page, "GPU market")
    from space.market import showcase_seed  # noqa: PLC0415
    # the page's default seed is the first whose expert game forms a coalition and judges a pitch
    assert page.locator("#market-seed input").input_value() == str(showcase_seed())
    page.locator("#market-start").click()  # the rule expert plays lab 0 by default
    rounds = page.locator("#market-rounds")
    rounds.get_by_text("Outcome (every lab)").wait_for(timeout=60_000)
    assert "Round 1 of 8" in rounds.inner_text() and "judge score" in rounds.inner_text().lower()
    assert "reward" in page.locator("#market-outcome").inner_text()
    shot(page, "GPU market")
    pick(page, "market-policy", "human")
    page.locator("#market-start").click()
    # exact: the before/after games below may quote a model's reply that starts the same way
    page.get_by_text("You are lab0", exact=True).wait_for(timeout=30_000)
    assert "Outcome (every lab)" not in rounds.inner_text()  # a person sees their own view only
    for action in ('{"action": "buy_spot", "hours": 10}', '{"action": "finish"}'):  # finish: the agents end it
        page.locator("#market-action textarea").fill(action)
        page.locator("#market-action textarea").press("Tab")
        before = rounds.inner_text()  # the person's view lists their actions and what followed
        page.locator("#market-send").click()
        page.wait_for_function("""([before]) => document.querySelector('#market-rounds').innerText !== before
            || document.querySelector('#market-outcome').innerText.trim() !== ''""", arg=[before], timeout=30_000)
    page.locator("#market-outcome").get_by_text("reward").wait_for(timeout=60_000)
    text = rounds.text_content()  # earlier rounds are folded: their text is in the page, not on screen
    assert "buy_spot" in text and "Outcome (every lab)" in text
    assert page.errors == [], f"console errors: {page.errors}"


CLIPPED_JS = """(ids) => ids.flatMap(id => {
    const root = document.getElementById(id);
    if (!root || root.offsetParent === null) return [];
    return [root, ...root.querySelectorAll('*')].filter(el => {
        const st = getComputedStyle(el);
        const v = ['auto', 'scroll'].includes(st.overflowY) && el.scrollHeight > el.clientHeight + 2;
        const h = window.innerWidth > 1000 && ['auto', 'scroll'].includes(st.overflowX)
                  && el.scrollWidth > el.clientWidth + 2;
        return v || h;
    }).map(el => id + ': ' + (el.className || el.tagName));
})"""
TABLES = {"At a glance": ["players-table"], "Training": ["pipeline-table", "pipeline-table-narrow"],
          "Artifacts": ["artifacts-table"], "GPU market": ["market-table"],
          "Evaluation": ["eval-table", "generalisation-table", "eval-table-narrow", "generalisation-table-narrow"]}


HEIGHT = {1440: 900, 390: 844}  # a laptop, a phone


@pytest.mark.parametrize("width", [1440, 390])
def test_the_first_screen_says_what_was_learned_without_scrolling(page, space_url, width):
    """What a visitor sees before scrolling: the headline sentence and the reward chart, drawn."""
    pg = page.context.browser.new_page(viewport={"width": width, "height": HEIGHT[width]})
    pg.goto(space_url, wait_until="load", timeout=60_000)
    story = pg.locator("#story")
    story.get_by_text("Did it learn?").wait_for(timeout=60_000)
    pg.wait_for_function("() => document.querySelector('#story-chart .main-svg') !== null", timeout=30_000)
    assert pg.evaluate("() => window.scrollY") == 0
    for sel in ("#story", "#story-chart .main-svg"):
        box = pg.locator(sel).first.bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT[width] and box["width"] <= width, \
            f"{sel} at {width} px is not on the first screen: {box}"
    assert "scores" in story.inner_text() and "expert" in story.inner_text()
    pg.close()


def test_every_tab_is_reachable_at_phone_width_and_no_page_shows_an_absolute_path(page, space_url):
    pg = page.context.browser.new_page(viewport={"width": 390, "height": 844})
    pg.goto(space_url, wait_until="load", timeout=60_000)
    pg.locator("#story").get_by_text("Did it learn?").wait_for(timeout=60_000)
    for name in TABS:
        tab = pg.get_by_role("tab", name=name)
        box = tab.bounding_box()  # the tab bar wraps: every tab on screen, none behind a scroll or a menu
        assert box and 0 <= box["x"] and box["x"] + box["width"] <= 390, f"tab {name!r} off screen: {box}"
        tab.click()
        pg.get_by_role("tab", name=name, selected=True).wait_for(timeout=30_000)
        if name == "Artifacts":
            pg.locator("#artifact-provenance").get_by_text("command").first.wait_for(timeout=30_000)
        if name == "Before vs after":
            pg.locator("#ba-summary").get_by_text("ceiling").first.wait_for(timeout=30_000)
        text = pg.evaluate("() => document.body.innerText")
        found = ABSOLUTE.search(text)
        assert found is None, f"{name}: an absolute path on the page: {text[max(0, found.start() - 80):found.end() + 80]!r}"
    pg.close()


def test_a_visitor_takes_the_challenge_and_lands_on_the_leaderboard(page):
    open_tab(page, "Out-haggle it")
    page.locator("#ch-name textarea").fill("browser visitor")
    page.locator("#ch-name textarea").press("Tab")
    page.locator("#ch-start").click()
    card = page.locator("#ch-card")
    card.get_by_text("Your budget (private)").wait_for(timeout=60_000)
    budget = float(re.search(r"Your budget \(private\): \$([\d,]+\.\d\d)", card.inner_text()).group(1).replace(",", ""))
    result = page.locator("#ch-result")
    for k in range(10):
        if "leaderboard" in result.inner_text():
            break
        before = page.locator("#ch-chat .message").count()
        page.locator("#ch-price input").fill(f"{budget * (0.55 + 0.07 * k):.2f}")
        page.locator("#ch-price input").press("Tab")
        page.locator("#ch-send").click()
        page.wait_for_function(f"""() => document.querySelector('#ch-result').innerText.includes('leaderboard')
            || document.querySelector('.toast-body')
            || [...document.querySelectorAll('#ch-chat .message')].length > {before} + 1""", timeout=60_000)
        assert page.locator(".toast-body").count() == 0, page.locator(".toast-body").first.inner_text()
    result.get_by_text("leaderboard").wait_for(timeout=60_000)
    text = result.inner_text()
    assert "you" in text and "trained model" in text and "expert" in text and re.search(r"seed \d+", text)
    page.locator("#ch-leaderboard").get_by_text("browser visitor").filter(visible=True).first.wait_for(timeout=30_000)
    shot(page, "Out-haggle it")
    assert page.errors == [], f"console errors: {page.errors}"


@pytest.mark.parametrize("width", [1440, 390])
def test_every_tab_at_desktop_and_phone_width_with_no_clipped_table(page, space_url, width):
    pg = page.context.browser.new_page(viewport={"width": width, "height": 900})  # the module's browser
    pg.goto(space_url, wait_until="load", timeout=60_000)
    pg.get_by_role("tab", name="Play").wait_for(timeout=60_000)
    for name in TABS:
        pg.get_by_role("tab", name=name).click()  # the tab bar wraps at any width: every tab is on screen
        pg.get_by_role("tab", name=name, selected=True).wait_for(timeout=30_000)
        if name == "At a glance":
            pg.locator("#story").get_by_text("Did it learn?").wait_for(timeout=30_000)
            pg.get_by_text("Headline results, the models and the players").click()  # the folded tables
            pg.locator("#model-cards").get_by_text("In the model seat").wait_for(timeout=30_000)
        if name == "Artifacts":  # the selected file is shown at once
            pg.locator("#artifact-provenance").get_by_text("command").first.wait_for(timeout=30_000)
        pg.wait_for_timeout(0)
        clipped = pg.evaluate(CLIPPED_JS, TABLES.get(name, []))
        assert clipped == [], f"{name} at {width} px: content hidden in an inner scroll: {clipped}"
        plots = TABS[name] if width > 600 else NARROW_PLOTS.get(name, TABS[name])  # a phone's simpler views
        if plots:  # the screenshot shows the tab's plots drawn
            pg.wait_for_function(f"""() => [...document.querySelectorAll('.js-plotly-plot')]
                .filter(e => e.offsetParent !== null && e.querySelector('.main-svg')).length >= {plots}""",
                                 timeout=30_000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^a-z]+", "-", name.lower()).strip("-")
        pg.screenshot(path=str(SHOTS / f"{slug}-{width}.png"), full_page=True)
    pg.close()


def test_a_person_selling_sees_why_a_move_was_refused_and_the_model_is_only_a_buyer(page):
    open_tab(page, "Play")
    page.locator("#play-seller input").click()
    names = [o.inner_text() for o in page.get_by_role("option").all()]
    assert "human" in names and "model" not in names, names
    page.get_by_role("option", name="human", exact=True).click()
    pick(page, "play-buyer", "expert")
    page.locator("#start-game").click()
    card = page.locator("#game-card")
    card.get_by_text("Your cost (private)").wait_for(timeout=30_000)
    cost = float(re.search(r"Your cost \(private\): \$([\d,]+\.\d\d)", card.inner_text()).group(1).replace(",", ""))
    page.locator("#human-price input").fill(f"{cost / 2:.2f}")
    page.locator("#human-price input").press("Tab")
    page.locator("#human-send").click()
    page.locator("#game-chat").get_by_text("was refused").wait_for(timeout=30_000)
    assert "below your cost" in page.locator("#game-chat").inner_text()


def test_the_shipped_smollm2_rl_buyer_plays_a_whole_game_in_the_model_seat(page, monkeypatch):
    """With no ``HAGGLE_MODEL`` set, the seat goes where the shipped numbers put it: the SmolLM2 GRPO adapter
    (best mean over the builtin and Amazon test splits). It loads offline and buys a held-out product against a
    scripted seller in a real browser, the whole game played on one click (a spectator game), in the protocol."""
    from space.model import ENV_VAR, headline_checkpoint
    from training.common.provenance import read_lineage

    monkeypatch.delenv(ENV_VAR)  # the tests' tiny seat (conftest) off: the Space's own default
    seat = headline_checkpoint()
    assert seat.name == "grpo-smollm2" and "smollm2" in str(read_lineage(str(seat))).lower(), seat
    open_tab(page, "Play")
    pick(page, "play-buyer", "model")
    pick(page, "play-seller", "conceder")
    page.locator("#start-game").click()
    # each reply is shown while it is written (a spectator sees it all, reasoning included)
    page.locator("#game-chat").get_by_text("(writing…)").first.wait_for(timeout=120_000)
    outcome = page.locator("#game-outcome")
    outcome.get_by_text("reward").first.wait_for(timeout=300_000)
    chat = page.locator("#game-chat").inner_text()
    assert "grpo-smollm2" in page.locator("#game-card").text_content()  # the card's folded "What plays as model"
    assert "format" not in outcome.inner_text().lower(), outcome.inner_text()  # it answered in the protocol
    assert re.search(r"buyer:.*\$\d", chat, re.S), "the model buyer made priced moves"
    assert page.locator(".toast-body").count() == 0
    shot(page, "Play SmolLM")
    assert page.errors == [], f"console errors: {page.errors}"


def test_the_shipped_market_lab_plays_a_whole_market_game_as_lab_0(page):
    """The shipped market adapter (SmolLM2, SFT then GRPO as lab 0) loads offline and plays a whole single_trade
    game in the GPU market tab, named in the game's card: its actions are shown round by round (greedy, this one
    waits), and the game ends with every lab's outcome."""
    from space.model import MARKET_SHIPPED, market_model_path

    assert market_model_path() == str(MARKET_SHIPPED) and (MARKET_SHIPPED / "adapter_model.safetensors").is_file()
    open_tab(page, "GPU market")
    pick(page, "market-task", "single_trade")
    pick(page, "market-policy", "model")
    page.locator("#market-start").click()
    # this game's card (not the last test's game, still on the page): the model named in lab 0's seat, game over;
    # SmolLM2 on a 2-core CPU takes seconds an action
    page.wait_for_function("""([name]) => { const t = document.querySelector('#market-card').innerText;
        return t.includes('single_trade') && t.includes(name) && t.includes('game over'); }""",
                           arg=[MARKET_SHIPPED.name], timeout=600_000)
    assert "Outcome (every lab)" in page.locator("#market-rounds").inner_text()
    assert "reward" in page.locator("#market-outcome").inner_text()
    assert page.locator(".toast-body").count() == 0
    shot(page, "GPU market model")
    assert page.errors == [], f"console errors: {page.errors}"


# a chart's title or subplot title that leaves its chart or lies over another of its texts (axis titles, annotations,
# tick labels, legend entries)
OVERLAPS_JS = """() => {
    const out = [];
    const box = el => el.getBoundingClientRect();
    const meets = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
        if (plot.offsetParent === null) continue;
        const p = box(plot);
        const texts = [...plot.querySelectorAll('text')].filter(t => t.textContent.trim() && box(t).width > 0);
        const titles = texts.filter(t => t.closest('.g-gtitle') || t.closest('.annotation'));
        for (const t of titles) {
            const b = box(t);
            if (b.left < p.left - 1 || b.right > p.right + 1) out.push('outside its chart: ' + t.textContent);
            for (const o of texts) {
                if (o !== t && meets(b, box(o))) out.push(t.textContent + ' over ' + o.textContent);
            }
        }
    }
    return [...new Set(out)];
}"""


@pytest.mark.parametrize("width", [1440, 390])
def test_every_tab_fits_the_screen_with_no_chart_title_over_another_text(page, space_url, width):
    """At a laptop's and a phone's width: no tab scrolls sideways, and no chart's title or subplot title leaves
    its chart or overlaps another of its texts (a phone gets the simpler charts, not squeezed ones)."""
    pg = page.context.browser.new_page(viewport={"width": width, "height": HEIGHT[width]})
    pg.goto(space_url, wait_until="load", timeout=60_000)
    pg.get_by_role("tab", name="Play").wait_for(timeout=60_000)
    for name in TABS:
        pg.get_by_role("tab", name=name).click()
        pg.get_by_role("tab", name=name, selected=True).wait_for(timeout=30_000)
        pg.wait_for_timeout(1500)  # the plots of the tab drawn
        wide = pg.evaluate("() => document.documentElement.scrollWidth")
        assert wide <= width + 1, f"{name} at {width} px scrolls sideways: {wide} px wide"
        overlaps = pg.evaluate(OVERLAPS_JS)
        assert overlaps == [], f"{name} at {width} px: {overlaps}"
    pg.close()


@pytest.mark.parametrize("width", [1440, 390])
def test_every_model_bar_on_the_first_screen_names_its_family(page, space_url, width):
    """The first screen's bars say whose they are: the tiny model built here or SmolLM2 (never a bare ``grpo``),
    and the sentence gives a verdict read off the CIs."""
    pg = page.context.browser.new_page(viewport={"width": width, "height": HEIGHT[width]})
    pg.goto(space_url, wait_until="load", timeout=60_000)
    pg.wait_for_function("() => document.querySelector('#story-chart .main-svg') !== null", timeout=60_000)
    labels = pg.evaluate("() => [...document.querySelectorAll('#story-chart .ytick text')].map(t => t.textContent)")
    assert labels, "no bar labels"
    for label in labels:
        assert label.startswith(("tiny ", "SmolLM2 ")) or "best baseline" in label, label
    story = pg.locator("#story").inner_text()
    assert re.search(r"(above|under|level with) the rule-based expert", story), story
    pg.close()


def test_a_persons_talk_is_shown_as_text_and_a_refused_move_is_a_warning(page):
    """HTML typed into Talk is shown as typed (no element made of it); a move the game cannot play is a warning
    that leaves the chat and the typed words in place, not red error badges."""
    open_tab(page, "Play")
    pick(page, "play-buyer", "human")
    pick(page, "play-seller", "neutral")
    page.locator("#start-game").click()
    card = page.locator("#game-card")
    card.get_by_text("Your budget (private)").wait_for(timeout=30_000)
    budget = float(re.search(r"Your budget \(private\): \$([\d,]+\.\d\d)", card.inner_text()).group(1).replace(",", ""))
    talk = "<b>bold</b> <img src=x> deal?"
    page.locator("#human-price input").fill(f"{budget * 0.2:.2f}")  # low: the seller answers, the game goes on
    page.locator("#human-talk textarea").fill(talk)
    page.locator("#human-send").click()
    chat = page.locator("#game-chat")
    chat.get_by_text("<b>bold</b>", exact=False).first.wait_for(timeout=30_000)
    assert chat.locator("img[src='x']").count() == 0 and chat.locator("b", has_text="bold").count() == 0
    page.wait_for_function("() => document.querySelector('#game-chat').innerText.includes('seller:')",
                           timeout=30_000)  # the seller's answer: the person's turn again
    page.wait_for_timeout(500)
    before = chat.inner_text()
    page.locator("#human-price input").fill("")  # no price: the move cannot be played
    page.locator("#human-talk textarea").fill("an offer without a price")
    page.locator("#human-send").click()
    page.locator(".toast-body").first.wait_for(timeout=30_000)
    assert "price" in page.locator(".toast-body").first.inner_text()
    page.wait_for_timeout(500)
    assert chat.inner_text() == before, "the chat stays as it was"
    assert page.locator("#human-talk textarea").input_value() == "an offer without a price"
    assert page.locator(".error").filter(visible=True).count() == 0, "no red error badge"


def test_the_api_and_training_pages_read_as_written(page):
    """The API tab shows ``<think>`` as text in every reasoning_mode description; the Training tab names no
    missing artifact."""
    fresh = page.context.browser.new_page(viewport={"width": 1440, "height": 900})
    fresh.goto(page.url, wait_until="load", timeout=60_000)
    fresh.get_by_role("tab", name="Play").click()
    assert fresh.locator("#seed textarea").input_value() == ""  # the seed starts empty (a random game), not at 0
    fresh.close()
    open_tab(page, "API")
    text = page.locator("#api-docs").inner_text()
    assert text.count("'option_b' (reasoning in <think> tags)") == 3, text
    open_tab(page, "Training")
    page.wait_for_timeout(1000)
    assert "not produced yet" not in page.evaluate("() => document.body.innerText")
    open_tab(page, "Before vs after")  # read-only transcripts: no trash button to wipe them
    page.locator("#ba-summary").get_by_text("ceiling").first.wait_for(timeout=30_000)
    assert page.locator("button[aria-label='Clear']").filter(visible=True).count() == 0


def test_the_market_before_after_shows_each_policys_game_at_full_width(page):
    """The market's before/after: one policy's game at a time, its table cells at least 8 characters wide, and the
    trained lab's behaviour said in words beside its bars (whose values are printed, a bar of 0 included)."""
    open_tab(page, "GPU market")
    page.locator("#market-ba-summary").get_by_text("held-out seed").wait_for(timeout=30_000)
    narrow = page.evaluate("""() => {
        const c = document.createElement('canvas').getContext('2d');
        return [...document.querySelectorAll('[id^=market-ba-] td')].filter(td => td.offsetParent !== null)
            .filter(td => { const st = getComputedStyle(td); c.font = st.fontSize + ' ' + st.fontFamily;
                            const room = td.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
                            const need = Math.min(c.measureText(td.textContent.trim()).width,
                                                  c.measureText('00000000').width);
                            return room + 1 < need; })
            .map(td => td.textContent.slice(0, 30)); }""")
    assert narrow == [], f"cells narrower than 8 characters: {narrow[:5]}"
    sentence = page.locator("#market-lab-sentence")
    assert "trained lab" in sentence.inner_text() and "expert" in sentence.inner_text()
    fresh = page.context.browser.new_page(viewport={"width": 1440, "height": 900})  # no game played in this page
    fresh.goto(page.url, wait_until="load", timeout=60_000)
    fresh.get_by_role("tab", name="GPU market").click()
    fresh.locator("#market-start").wait_for(timeout=30_000)
    assert fresh.locator("#market-chart").filter(visible=True).count() == 0, "no empty chart before a game"
    fresh.close()


def test_a_game_between_agents_is_shown_while_it_is_played(page):
    """A model-vs-scripted game shows its replies as they come, not all at once when it is over."""
    open_tab(page, "Play")
    pick(page, "play-buyer", "model")
    pick(page, "play-seller", "boulware")
    page.locator("#start-game").click()
    # a reply on screen while the game has no outcome yet
    page.wait_for_function("""() => document.querySelectorAll('#game-chat .message').length >= 1
        && document.querySelector('#game-outcome').innerText.trim() === ''""", timeout=60_000, polling=50)
    page.locator("#game-outcome").get_by_text("reward").wait_for(timeout=120_000)
    pick(page, "play-buyer", "human")  # leave the tab as the other tests expect it
