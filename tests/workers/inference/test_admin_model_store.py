"""/admin/load loads only directories inside the server's model store (--model-store): a relative path, `..`, an
absolute path outside, a link that leads out (the directory itself or a file in it) answer 403 over HTTP before
anything is read, and the server keeps serving what it served."""

import shutil

import httpx

from tests.workers.inference.conftest import ADMIN_TOKEN, serve

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def test_admin_load_refuses_every_path_outside_the_model_store(default_model_dir, tmp_path):
    store = tmp_path / "store"
    inside = store / "tenant" / "v1"
    shutil.copytree(default_model_dir, inside)
    outside = tmp_path / "elsewhere"
    shutil.copytree(default_model_dir, outside)
    (store / "link-out").symlink_to(outside, target_is_directory=True)
    mixed = store / "mixed"
    shutil.copytree(default_model_dir, mixed)
    weights = next(path.name for path in mixed.iterdir() if path.suffix == ".safetensors")
    (mixed / weights).unlink()
    (mixed / weights).symlink_to(outside / weights)
    refused = [
        "tenant/v1",  # relative
        f"{store}/tenant/../../elsewhere",
        f"{store}/tenant/v1/..",
        str(outside),
        str(default_model_dir),
        "/etc",
        str(store / "link-out"),
        str(mixed),
    ]
    with serve(default_model_dir, admin_token=ADMIN_TOKEN, model_store=[store]) as server:
        for path in refused:
            response = httpx.post(
                f"{server.base_url}/admin/load", json={"path": path, "version": 9}, headers=AUTH, timeout=60
            )
            assert response.status_code == 403, (path, response.text)
            error = response.json()["error"]
            assert (error["code"], error["param"]) == ("outside_model_store", "path"), path
        version = httpx.get(f"{server.base_url}/admin/version", headers=AUTH, timeout=30).json()
        assert version["version"] == 0
        loaded = httpx.post(
            f"{server.base_url}/admin/load",
            json={"path": str(inside), "version": 1},
            headers=AUTH,
            timeout=120,
        )
        assert loaded.status_code == 200, loaded.text
        assert httpx.get(f"{server.base_url}/admin/version", headers=AUTH, timeout=30).json()["version"] == 1
