"""Weight swaps, tokenizer refusal, pause/resume and admin auth, on a fresh server per test."""

import asyncio
import time

import httpx
import torch

from tests.workers.inference.conftest import ADMIN_TOKEN, load_reference_model, reference_logprobs, serve
from workers.inference.client import request_completion

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
LONG_BODY = {
    "model": "default",
    "prompt": "The agent reads the file",
    "max_tokens": 300,
    "temperature": 0,
    "ignore_eos": True,
    "return_token_ids": True,
    "logprobs": 0,
}
SHORT_BODY = {**LONG_BODY, "max_tokens": 20}


def admin(server, verb, path, **kwargs):
    return httpx.request(verb, f"{server.base_url}/admin/{path}", headers=AUTH, timeout=60, **kwargs)


async def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def test_swap_under_load_changes_version_with_no_failed_request(
    admin_server, default_model_dir, tool_model_dir
):
    url = f"{admin_server.api_url}/completions"

    async def burst_with_swap():
        async with httpx.AsyncClient(timeout=120) as client:
            before = [
                asyncio.create_task(request_completion(client, url, {**LONG_BODY, "stream": stream}))
                for stream in (False, True, False, True)
            ]
            await wait_until(lambda: admin_server.engine.stats().generated_tokens >= 8)
            swap = asyncio.create_task(
                client.post(
                    f"{admin_server.base_url}/admin/load",
                    headers=AUTH,
                    json={"path": str(tool_model_dir), "version": 1},
                )
            )
            during = [asyncio.create_task(request_completion(client, url, SHORT_BODY)) for _ in range(8)]
            swap_response = await swap
            after = await request_completion(client, url, SHORT_BODY)
            return await asyncio.gather(*before), await asyncio.gather(*during), after, swap_response

    before, during, after, swap_response = asyncio.run(burst_with_swap())
    assert swap_response.status_code == 200, swap_response.text
    report = swap_response.json()
    assert report["previous_version"] == 0
    assert report["version"] == 1
    assert report["recomputed_sequences"] >= 4  # the long requests were in flight
    assert admin(admin_server, "GET", "version").json()["version"] == 1
    assert after.policy_version == 1
    assert after.choices[0].policy_versions == (1,) * 20

    old_model, new_model = load_reference_model(default_model_dir), load_reference_model(tool_model_dir)
    for result in before + during:
        [choice] = result.choices
        assert choice.finish_reason == "length"
        versions = choice.policy_versions
        assert list(versions) == sorted(versions)
        assert set(versions) <= {0, 1}
    for result in before:  # each long request straddles the swap: old weights, then new
        [choice] = result.choices
        assert choice.policy_versions[0] == 0
        assert choice.policy_versions[-1] == 1
        assert len(choice.completion_token_ids) == 300
        old_part = reference_logprobs(old_model, result.prompt_token_ids, choice.completion_token_ids)
        new_part = reference_logprobs(new_model, result.prompt_token_ids, choice.completion_token_ids)
        stamped_new = torch.tensor(choice.policy_versions) == 1
        expected = torch.where(stamped_new, new_part, old_part)
        assert torch.allclose(torch.tensor(choice.logprobs), expected, atol=1e-4, rtol=0)


def test_a_swap_that_keeps_the_caches_goes_on_over_the_old_weights_keys_and_values(
    admin_server, default_model_dir, tool_model_dir
):
    url = f"{admin_server.api_url}/completions"

    async def long_request_with_swap():
        async with httpx.AsyncClient(timeout=120) as client:
            long = asyncio.create_task(request_completion(client, url, LONG_BODY))
            await wait_until(lambda: admin_server.engine.stats().generated_tokens >= 8)
            swap = await client.post(
                f"{admin_server.base_url}/admin/load",
                headers=AUTH,
                json={"path": str(tool_model_dir), "version": 1, "recompute_kv": False},
            )
            return await long, swap

    result, swap = asyncio.run(long_request_with_swap())
    assert swap.status_code == 200, swap.text
    assert swap.json()["recomputed_sequences"] == 0
    assert swap.json()["version"] == 1
    [choice] = result.choices
    versions = torch.tensor(choice.policy_versions)
    first_new = int(torch.nonzero(versions == 1)[0])
    assert 0 < first_new < len(versions)
    assert bool((versions[first_new:] == 1).all())
    # Reference: the old weights' keys and values up to the token before the first new one, the new
    # weights' from there on (the step that samples token k writes token k-1's keys with the new weights).
    old_model, new_model = load_reference_model(default_model_dir), load_reference_model(tool_model_dir)
    prompt, completion = list(result.prompt_token_ids), list(choice.completion_token_ids)
    kept = prompt + completion[: first_new - 1]
    with torch.no_grad():
        cache = old_model(input_ids=torch.tensor([kept]), use_cache=True).past_key_values
        logits = new_model(
            input_ids=torch.tensor([completion[first_new - 1 : -1]]), past_key_values=cache
        ).logits[0]
    expected_new = torch.log_softmax(logits.float(), -1).gather(
        1, torch.tensor(completion[first_new:])[:, None]
    )[:, 0]
    expected_old = reference_logprobs(old_model, prompt, completion)[:first_new]
    got = torch.tensor(choice.logprobs)
    assert torch.allclose(got[:first_new], expected_old, atol=1e-4, rtol=0)
    assert torch.allclose(got[first_new:], expected_new, atol=1e-4, rtol=0)
    recomputed = reference_logprobs(new_model, prompt, completion)[first_new:]
    assert not torch.allclose(got[first_new:], recomputed, atol=1e-3)  # not what a recompute would give
    bad = admin(admin_server, "POST", "load", json={"path": str(tool_model_dir), "recompute_kv": "no"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "recompute_kv"


def test_checkpoint_with_another_tokenizer_is_refused_and_old_weights_keep_serving(
    admin_server, mismatched_tokenizer_model_dir
):
    response = admin(
        admin_server, "POST", "load", json={"path": str(mismatched_tokenizer_model_dir), "version": 7}
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "tokenizer_mismatch"
    assert "tokenizer" in error["message"]
    assert admin(admin_server, "GET", "version").json()["version"] == 0
    completion = httpx.post(f"{admin_server.api_url}/completions", json=SHORT_BODY, timeout=60)
    assert completion.status_code == 200
    assert completion.json()["policy_version"] == 0


def test_load_of_a_missing_directory_is_refused(admin_server, tmp_path):
    response = admin(admin_server, "POST", "load", json={"path": str(tmp_path / "nothing"), "version": 1})
    assert response.status_code == 422
    assert "config.json" in response.json()["error"]["message"]
    response = admin(admin_server, "POST", "load", json={"version": 1})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "path"


def test_pause_holds_requests_and_resume_completes_them(admin_server):
    url = f"{admin_server.api_url}/completions"

    async def scenario():
        async with httpx.AsyncClient(timeout=120) as client:
            running = asyncio.create_task(client.post(url, json={**LONG_BODY, "max_tokens": 100}))
            await wait_until(lambda: admin_server.engine.stats().generated_tokens >= 2)
            paused = await client.post(f"{admin_server.base_url}/admin/pause", headers=AUTH)
            frozen_at = admin_server.engine.stats().generated_tokens
            waiting = asyncio.create_task(client.post(url, json=SHORT_BODY))
            await asyncio.sleep(0.5)
            still_pending = not running.done() and not waiting.done()
            tokens_while_paused = admin_server.engine.stats().generated_tokens - frozen_at
            status = (await client.get(f"{admin_server.base_url}/admin/version", headers=AUTH)).json()
            resumed = await client.post(f"{admin_server.base_url}/admin/resume", headers=AUTH)
            return paused, still_pending, tokens_while_paused, status, resumed, await running, await waiting

    paused, still_pending, tokens_while_paused, status, resumed, running, waiting = asyncio.run(scenario())
    assert paused.status_code == 200
    assert paused.json()["paused"] is True
    assert still_pending
    assert tokens_while_paused == 0
    assert status["paused"]
    assert status["waiting_requests"] == 1
    assert status["running_sequences"] == 1
    assert resumed.status_code == 200
    assert resumed.json()["paused"] is False
    assert running.status_code == 200
    assert len(running.json()["choices"][0]["token_ids"]) == 100
    assert waiting.status_code == 200
    assert len(waiting.json()["choices"][0]["token_ids"]) == 20


def test_admin_endpoints_need_the_token(admin_server, tool_model_dir):
    for verb, path in [
        ("POST", "load"),
        ("POST", "pause"),
        ("POST", "resume"),
        ("GET", "version"),
        ("GET", "stats"),
    ]:
        response = httpx.request(
            verb,
            f"{admin_server.base_url}/admin/{path}",
            json={"path": str(tool_model_dir)},
            headers={"Authorization": "Bearer wrong"},
        )
        assert response.status_code == 401, path
        assert response.json()["error"]["type"] == "authentication_error"
    assert (
        admin(admin_server, "GET", "version").json()["version"] == 0
    )  # the unauthorized load changed nothing
    assert admin(admin_server, "GET", "stats").status_code == 200


def test_admin_endpoints_refuse_a_missing_or_malformed_token(admin_server, tmp_path):
    for headers in (
        {},
        {"Authorization": ADMIN_TOKEN},
        {"Authorization": f"Bearer {ADMIN_TOKEN}x"},
        {"Authorization": "Bearer"},
    ):
        response = httpx.post(
            f"{admin_server.base_url}/admin/load", json={"path": str(tmp_path)}, headers=headers
        )
        assert response.status_code == 401, headers
    assert admin(admin_server, "GET", "version").json()["version"] == 0


def test_a_server_started_without_a_token_keeps_its_admin_api_closed(default_model_dir):
    with serve(default_model_dir) as running:
        for verb, path in [
            ("POST", "load"),
            ("POST", "pause"),
            ("POST", "resume"),
            ("GET", "version"),
            ("GET", "stats"),
        ]:
            for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Bearer None"}):
                response = httpx.request(
                    verb,
                    f"{running.base_url}/admin/{path}",
                    headers=headers,
                    json={"path": str(default_model_dir), "version": 5},
                )
                assert response.status_code == 403, (path, headers)
                assert response.json()["error"]["code"] == "admin_api_disabled"
        assert running.engine.version == 0
        assert not running.engine.status().paused
        assert httpx.get(f"{running.base_url}/health").status_code == 200  # the OpenAI side still serves
