"""POST /build over the API: steps, output lines, the cache, build args, labels, metadata
instructions, ONBUILD, failing steps, quiet mode, compressions and instruction files."""

from __future__ import annotations

import bz2
import gzip
import lzma
from typing import Any

import httpx

from tests.builds.conftest import BASE, build, built_id, context_tar, refused, stream_text
from tests.builds.test_build_context import _run


async def _config(api: httpx.AsyncClient, image: str) -> dict[str, Any]:
    r = await api.get(f"/images/{image}/json")
    assert r.status_code == 200, r.text
    return dict(r.json()["Config"])


async def test_build_then_every_step_hits_the_cache(api: httpx.AsyncClient) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nENV A=1\nRUN echo out $A; echo err >&2\n"
                           "COPY f /x/\nCMD [\"cat\", \"/x/f\"]\n", "f": "content\n"}
    first = await build(api, files, t="cache:1")
    text = stream_text(first)
    assert "Step 1 : FROM busybox" in text and "Step 3 : RUN echo out $A; echo err >&2" in text
    assert " ---> Running in " in text and "Removing intermediate container " in text
    assert "out 1\n" in text
    assert {"stream": "\x1b[91merr\n\x1b[0m"} in first
    image_id = built_id(first)
    assert text.endswith(f"Successfully built {image_id[7:19]}\nSuccessfully tagged cache:1\n")
    second = await build(api, files)
    again = stream_text(second)
    assert again.count(" ---> Using cache") == 4 and "Running in" not in again
    assert built_id(second) == image_id
    # the content, not the mtime, is the COPY key: a changed file misses from its step on
    changed = await build(api, {**files, "f": "other\n"})
    assert stream_text(changed).count(" ---> Using cache") == 2
    assert built_id(changed) != image_id
    fresh = await build(api, files, nocache="1")
    assert "Using cache" not in stream_text(fresh)
    assert built_id(fresh) != image_id
    cfg = await _config(api, "cache:1")
    assert cfg["Cmd"] == ["cat", "/x/f"] and "A=1" in cfg["Env"]


async def test_run_output_lands_in_the_image(api: httpx.AsyncClient) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nRUN mkdir /d && echo hi > /d/f\nWORKDIR /d\n"
                           "CMD cat f\n"}
    image = built_id(await build(api, files, t="runs:1"))
    r = await api.post("/containers/create", json={"Image": image})
    cid = r.json()["Id"]
    await api.post(f"/containers/{cid}/start")
    assert (await api.post(f"/containers/{cid}/wait")).json()["StatusCode"] == 0
    logs = await api.get(f"/containers/{cid}/logs", params={"stdout": "1"})
    assert logs.content.endswith(b"hi\n")


async def test_failing_run_reports_its_exit_code(api: httpx.AsyncClient) -> None:
    before = {c["Id"] for c in (await api.get("/containers/json?all=1")).json()}
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nRUN exit 3\n"}, forcerm="1")
    err = msgs[-1]
    assert err["errorDetail"] == {
        "code": 3, "message": "The command '/bin/sh -c exit 3' returned a non-zero code: 3"}
    assert err["error"] == err["errorDetail"]["message"]
    after = {c["Id"] for c in (await api.get("/containers/json?all=1")).json()}
    assert after == before  # forcerm removed the failed step's container


async def test_quiet_says_only_the_id(api: httpx.AsyncClient) -> None:
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nRUN echo loud\n"}, q="1")
    image = built_id(msgs)
    assert [m for m in msgs if "stream" in m] == [{"stream": image + "\n"}]
    failed = await build(api, {"Dockerfile": f"FROM {BASE}\nRUN echo loud; exit 1\n"}, q="1",
                         nocache="1")
    assert "loud" in stream_text(failed) and failed[-1]["errorDetail"]["code"] == 1


async def test_build_args(api: httpx.AsyncClient) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nARG WHO=nobody\nARG unused_default\n"
                           "RUN echo hello $WHO $HTTP_PROXY\nLABEL who=$WHO\n"}
    args = '{"WHO": "svc", "HTTP_PROXY": "http://proxy:3128"}'
    msgs = await build(api, files, buildargs=args)
    assert "hello svc http://proxy:3128" in stream_text(msgs)
    assert (await _config(api, built_id(msgs)))["Labels"]["who"] == "svc"
    again = await build(api, files, buildargs=args)
    assert built_id(again) == built_id(msgs)  # the args are part of the RUN's key
    other = await build(api, files, buildargs='{"WHO": "else"}')
    assert "hello else" in stream_text(other)
    unused = await build(api, files, buildargs='{"WHO": "x", "NOPE": "1", "ALSO": "2"}')
    assert unused[-1]["error"] == ("One or more build-args [ALSO NOPE] were not consumed, "
                                   "failing build.")


async def test_metadata_instructions(api: httpx.AsyncClient) -> None:
    svcfile = (f"FROM {BASE}\nMAINTAINER someone <a@b.c>\nENV P=/p Q=\"a b\"\nWORKDIR $P\n"
               "WORKDIR sub\nUSER 1000:1000\nEXPOSE 80 53/udp 8000-8001\nVOLUME /data $P/v\n"
               "LABEL a=1 \"b c\"=\"d e\"\nSTOPSIGNAL SIGUSR1\nENTRYPOINT [\"/bin/echo\"]\n"
               "CMD [\"x\"]\nONBUILD RUN echo triggered | tee /tmp/from-trigger\n")
    msgs = await build(api, {"Svcfile": svcfile}, labels='{"from.param": "yes"}', t="meta:1")
    cfg = await _config(api, built_id(msgs))
    assert cfg["WorkingDir"] == "/p/sub" and cfg["User"] == "1000:1000"
    assert set(cfg["ExposedPorts"]) == {"80/tcp", "53/udp", "8000/tcp", "8001/tcp"}
    assert set(cfg["Volumes"]) == {"/data", "/p/v"}
    assert cfg["Labels"] == {"a": "1", "b c": "d e", "from.param": "yes"}
    assert cfg["StopSignal"] == "SIGUSR1" and cfg["Entrypoint"] == ["/bin/echo"]
    assert cfg["Cmd"] == ["x"] and cfg["OnBuild"] == ["RUN echo triggered | tee /tmp/from-trigger"]
    assert "Q=a b" in cfg["Env"]
    inspect = (await api.get("/images/meta:1/json")).json()
    assert inspect["Author"] == "someone <a@b.c>"
    child = await build(api, {"Dockerfile": "FROM meta:1\n"})
    text = stream_text(child)
    assert "# Executing 1 build trigger..." in text and "triggered" in text
    assert (await _config(api, built_id(child)))["OnBuild"] in (None, [])
    assert await _run(api, built_id(child), "cat /tmp/from-trigger") == "triggered\n"


async def test_compressed_contexts_and_named_files(api: httpx.AsyncClient) -> None:
    tar = context_tar({"Svcfile": f"FROM {BASE}\nLABEL which=svcfile\n",
                       "Dockerfile": f"FROM {BASE}\nLABEL which=dockerfile\n",
                       "sub/Other": f"FROM {BASE}\nLABEL which=other\n"})
    for body in (tar, gzip.compress(tar), bz2.compress(tar), lzma.compress(tar)):
        msgs = await build(api, body)
        assert (await _config(api, built_id(msgs)))["Labels"]["which"] == "svcfile"
    msgs = await build(api, tar, dockerfile="sub/Other")
    assert (await _config(api, built_id(msgs)))["Labels"]["which"] == "other"
    msgs = await build(api, tar, dockerfile="Dockerfile")
    assert (await _config(api, built_id(msgs)))["Labels"]["which"] == "dockerfile"
    assert await refused(api, tar, dockerfile="Nope") == \
        "Cannot locate specified Dockerfile: Nope"
    assert await refused(api, {"Dockerfile": " \n"}) == \
        "The Dockerfile (Dockerfile) cannot be empty"


async def test_lowercase_dockerfile_is_the_last_fallback(api: httpx.AsyncClient) -> None:
    lower = {"dockerfile": f"FROM {BASE}\nLABEL which=lowercase\n"}
    msgs = await build(api, lower)
    assert (await _config(api, built_id(msgs)))["Labels"]["which"] == "lowercase"
    both = {**lower, "Dockerfile": f"FROM {BASE}\nLABEL which=dockerfile\n"}
    msgs = await build(api, both)
    assert (await _config(api, built_id(msgs)))["Labels"]["which"] == "dockerfile"
    assert await refused(api, {"dockerfile.txt": "FROM x\n"}) == \
        "Cannot locate specified Dockerfile: Dockerfile (nor Svcfile)"


async def test_errors_name_the_line(api: httpx.AsyncClient) -> None:
    assert await refused(api, {"Dockerfile": f"FROM {BASE}\n\nENV ONLY\n"}) == \
        "Dockerfile parse error line 3: ENV: ENV must have two arguments"
    msgs = await build(api, {"Dockerfile": "FROM not-here:1\n"})
    assert msgs[-1]["error"].startswith("FROM not-here:1: pulling the image failed: ")
    msgs = await build(api, {"Dockerfile": "RUN true\n"})
    assert "source image with `from`" in msgs[-1]["error"]


async def test_bad_query_is_a_400(api: httpx.AsyncClient) -> None:
    for params in ({"t": "Bad:Name:x"}, {"buildargs": "[1]"}, {"labels": "{"},
                   {"memory": "abc"}, {"nocache": "maybe"}):
        r = await api.post("/build", params=params, content=context_tar({"Dockerfile": "x"}))
        assert r.status_code == 400, (params, r.text)



async def test_run_gets_the_build_limits(api: httpx.AsyncClient) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nRUN df -k /dev/shm | tail -1; "
                           "cat /sys/fs/cgroup/memory/memory.limit_in_bytes\n"}
    msgs = await build(api, files, shmsize=str(32 << 20), memory=str(64 << 20), nocache="1")
    text = stream_text(msgs)
    assert " 32768 " in text and f"{64 << 20}\n" in text, text
