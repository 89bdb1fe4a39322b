"""The ``vlm`` tiny-model preset and image prompts rendered for it (issue 45's first part).

The model is Qwen2.5-VL's architecture, read by ``transformers`` as any downloaded
checkpoint; the image decides what it predicts, so the vision tower is wired to the text
model."""

from __future__ import annotations

import json

import pytest
import torch
from vlm_data import ask, squares

from trinity.launcher.engines.mm_inputs import (
    IMAGE_PAD,
    load_image_processor,
    mm_token_type_ids,
    render_vl_prompt,
)
from trinity.launcher.tiny_model import PRESETS, build_tiny_model


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("vlm"), PRESETS["vlm"])


@pytest.fixture(scope="module")
def parts(vlm_dir):
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(vlm_dir)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(vlm_dir).eval()
    return tokenizer, load_image_processor(vlm_dir), model


def test_the_preset_is_a_qwen2_5_vl_with_its_image_processor(vlm_dir):
    config = json.loads((vlm_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]
    assert config["vision_config"]["depth"] == 2
    assert (vlm_dir / "preprocessor_config.json").is_file()
    # built from the same spec: reused as it is
    before = (vlm_dir / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(vlm_dir, PRESETS["vlm"]) == vlm_dir
    assert (vlm_dir / "model.safetensors").stat().st_mtime_ns == before


def test_an_image_becomes_its_token_count_of_placeholders(parts):
    tokenizer, processor, _ = parts
    prompt = render_vl_prompt(tokenizer, processor, ask(squares(2, size=(100, 60))))
    grid = prompt.multi_modal_inputs["image_grid_thw"]
    assert grid.shape == (1, 3) and int(grid[0, 0]) == 1
    pad = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    # one token per 2 x 2 merge of 14-pixel patches; one row of pixel_values per patch
    assert prompt.prompt_ids.count(pad) == int(grid.prod()) // 4
    assert prompt.multi_modal_inputs["pixel_values"].shape[0] == int(grid.prod())
    text = tokenizer.decode(prompt.prompt_ids)
    assert text.startswith("<|im_start|>user\n<|vision_start|>" + IMAGE_PAD)
    assert text.endswith("<|vision_end|>=<|im_end|>\n<|im_start|>assistant\n")


def test_openai_image_url_parts_and_hf_image_dicts_render_alike(parts, tmp_path):
    import base64
    import io

    tokenizer, processor, _ = parts
    buffer = io.BytesIO()
    squares(3).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    openai = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": "="},
            ],
        }
    ]
    hf_dict = ask({"bytes": buffer.getvalue(), "path": None})
    a = render_vl_prompt(tokenizer, processor, openai)
    b = render_vl_prompt(tokenizer, processor, hf_dict)
    assert a.prompt_ids == b.prompt_ids
    assert torch.equal(a.multi_modal_inputs["pixel_values"], b.multi_modal_inputs["pixel_values"])


def test_the_image_decides_what_the_model_predicts(parts):
    tokenizer, processor, model = parts

    def next_token_logits(image) -> torch.Tensor:
        prompt = render_vl_prompt(tokenizer, processor, ask(image))
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prompt.prompt_ids]), **prompt.multi_modal_inputs)
        return out.logits[0, -1]

    one, five = next_token_logits(squares(1)), next_token_logits(squares(5))
    assert torch.equal(one, next_token_logits(squares(1)))  # deterministic
    assert not torch.allclose(one, five)


def test_generation_from_an_image_prompt(parts):
    tokenizer, processor, model = parts
    prompt = render_vl_prompt(tokenizer, processor, ask(squares(4)))
    ids = torch.tensor([prompt.prompt_ids])
    torch.manual_seed(0)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        **prompt.multi_modal_inputs,
        max_new_tokens=4,
        do_sample=True,
    )
    assert out.shape[1] > ids.shape[1]


def test_a_text_prompt_needs_no_image_inputs(parts):
    tokenizer, processor, _ = parts
    prompt = render_vl_prompt(tokenizer, processor, [{"role": "user", "content": "2+2="}])
    assert prompt.multi_modal_inputs == {} and prompt.images == []
    assert tokenizer.decode(prompt.prompt_ids).startswith("<|im_start|>user\n2+2=")


def test_a_template_that_drops_images_is_refused_naming_the_placeholder(parts, vlm_dir):
    from transformers import AutoTokenizer

    _, processor, _ = parts
    text_only = AutoTokenizer.from_pretrained(vlm_dir)
    text_only.chat_template = "{%- for m in messages %}{{- m['role'] }}{%- endfor %}"
    with pytest.raises(ValueError, match=r"wrote 0 <\|image_pad\|> placeholder\(s\) for 1 image"):
        render_vl_prompt(text_only, processor, ask(squares(1)))


def test_a_text_model_has_no_image_processor(tmp_path):
    assert load_image_processor(build_tiny_model(tmp_path / "text")) is None


# ---------------------------------------------------------------------- engines
def _engine(vlm_dir, engine_type: str = "transformers"):
    from trinity.launcher.engines.base import EngineSettings
    from trinity.launcher.engines.hf_engine import TransformersEngine

    settings = EngineSettings(
        model_path=str(vlm_dir),
        engine_type=engine_type,
        max_model_len=256,
        max_response_tokens=6,
        dtype="float32",
        seed=0,
    )
    return TransformersEngine(settings)


def test_the_transformers_engine_chats_about_an_image_through_a_model_wrapper(vlm_dir, parts):
    """A workflow's ``model.chat`` with an image part: each sample's Experience holds the
    expanded prompt, the image processor's inputs for the trainer, and log-probs equal to the
    model's forward over the image and the tokens (the trainer's side of the check)."""
    import asyncio

    from trinity.launcher.engines.wrapper import EngineModelWrapper

    tokenizer, processor, model = parts
    engine = _engine(vlm_dir)

    async def chat():
        wrapper = await EngineModelWrapper.create(engine)
        return await wrapper.chat_async(ask(squares(3)), n=2, temperature=1.0)

    exps = asyncio.run(chat())
    assert len(exps) == 2
    expected = render_vl_prompt(tokenizer, processor, ask(squares(3)))
    for exp in exps:
        assert exp.tokens[: exp.prompt_length].tolist() == expected.prompt_ids
        mm = exp.multi_modal_inputs
        assert set(mm) == {"pixel_values", "image_grid_thw"}
        assert torch.equal(mm["pixel_values"], expected.multi_modal_inputs["pixel_values"])
        image_token = model.config.image_token_id
        with torch.no_grad():
            logits = model(
                input_ids=exp.tokens[None],
                mm_token_type_ids=mm_token_type_ids(exp.tokens[None], image_token),
                **mm,
            ).logits[0, :-1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, exp.tokens[1:, None])[:, 0]
        torch.testing.assert_close(exp.logprobs, lp[exp.prompt_length - 1 :], atol=1e-5, rtol=1e-5)


def test_an_image_experience_round_trips_its_image_inputs(vlm_dir):
    import asyncio

    from trinity.common.experience import Experience

    [exp] = asyncio.run(_engine(vlm_dir).chat(ask(squares(2))))
    [back] = Experience.deserialize_many(Experience.serialize_many([exp]))
    for key, value in exp.multi_modal_inputs.items():
        assert torch.equal(back.multi_modal_inputs[key], value)


def test_an_image_for_a_text_model_or_an_engine_without_images_says_so(tmp_path, vlm_dir):
    import asyncio

    from trinity.launcher.engines.base import BaseRolloutEngine, EngineSettings

    text_engine = _engine(build_tiny_model(tmp_path / "text"))
    with pytest.raises(ValueError, match="the model reads text only"):
        asyncio.run(text_engine.chat(ask(squares(1))))

    class TextOnly(BaseRolloutEngine):
        pass

    other = TextOnly(EngineSettings(model_path=str(vlm_dir), engine_type="vllm"))
    with pytest.raises(ValueError, match="engine_type 'vllm' does not read images yet"):
        asyncio.run(other.chat(ask(squares(1))))


def test_simple_mm_workflow_runs_on_the_tiny_vlm(vlm_dir):
    """Trinity-RFT's simple_mm_workflow, a row whose image is PNG bytes (a ``datasets`` Image
    column stored undecoded): every answer is scored and carries the image's inputs."""
    import asyncio
    import io

    from trinity.common.config import FormatConfig, GenerationConfig
    from trinity.common.workflows import Task, run_task_async
    from trinity.launcher.engines.wrapper import EngineModelWrapper

    buffer = io.BytesIO()
    squares(2).save(buffer, format="PNG")
    task = Task(
        workflow="simple_mm_workflow",
        raw_task={"problem": "How many?", "answer": "2", "images": [{"bytes": buffer.getvalue()}]},
        format_args=FormatConfig(prompt_key="problem", response_key="answer", image_key="images"),
        reward_fn="arithmetic_reward",
        repeat_times=3,
        rollout_args=GenerationConfig(temperature=1.0, max_tokens=4),
    )

    async def go():
        return await run_task_async(task, await EngineModelWrapper.create(_engine(vlm_dir)))

    exps, _ = asyncio.run(go())
    assert len(exps) == 3 and [e.eid.run for e in exps] == [0, 1, 2]
    for exp in exps:
        assert exp.reward in (0.0, 1.0)
        assert exp.multi_modal_inputs["image_grid_thw"].tolist() == [[1, 8, 8]]
