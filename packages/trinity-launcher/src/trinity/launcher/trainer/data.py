"""What the trainer reads: buffers of experiences, or SFT / DPO / CPT data sets formatted on the
fly.

``buffer.trainer_input.experience_buffer`` is either a storage the explorer (or another run)
filled with experiences (queue, priority queue, SQL, a file of serialized experiences), read
with ``trinity.buffer.get_buffer_reader``; or, for the SFT / DPO / CPT algorithms, a data set
of rows (jsonl, parquet, a data set directory with splits) that a formatter turns into
experiences (with the model's chat template; CPT's raw text without one). :class:`DatasetExperienceReader` is the latter:
it reads rows in order, epoch after epoch (``buffer.total_epochs``), and its position is part
of the trainer's checkpoint so a resumed run neither repeats nor skips a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from trinity.common.config import Config, StorageConfig
from trinity.common.experience import Experience

#: the schemas whose data sets are rows a formatter turns into experiences
DATASET_SCHEMAS = ("sft", "dpo", "cpt")


class EndOfData(Exception):
    """The data set's last epoch is read."""


class DatasetExperienceReader:
    """Rows of an SFT / DPO data set as experiences, ``batch_size`` at a time.

    Args:
        storage: the ``experience_buffer`` storage config (``path``, ``split``,
            ``subset_name``, ``format``).
        schema: ``"sft"``, ``"dpo"`` or ``"cpt"`` (the algorithm type's schema).
        tokenizer: a tokenizer or a model path to load one from.
        total_epochs: passes over the rows before :class:`EndOfData`.
    """

    def __init__(
        self, storage: StorageConfig, schema: str, tokenizer: Any, total_epochs: int = 1
    ) -> None:
        from trinity.buffer.formatter import get_formatter
        from trinity.buffer.taskset.loading import load_taskset_data

        self.storage = storage
        self.data = load_taskset_data(
            storage.path,
            split=storage.split,
            subset_name=storage.subset_name,
            name=storage.name or "experience_buffer",
        )
        self.formatter = get_formatter(schema, tokenizer, storage.format)
        self.total_epochs = int(total_epochs)
        self.epoch = 0
        self.index = 0

    def __len__(self) -> int:
        return len(self.data)

    def _format(self, index: int) -> Experience:
        from trinity.buffer.formatter import FormatError

        try:
            return self.formatter.format(self.data.row(index))
        except FormatError as exc:
            file, line = self.data.origin(index)
            raise FormatError(f"{file}, row {line}: {exc}") from None

    def read(self, batch_size: Optional[int] = None) -> list[Experience]:
        """The next ``batch_size`` rows (crossing into the next epoch when one ends).

        Raises:
            EndOfData: fewer than ``batch_size`` rows are left in the last epoch (a partial
                last batch is dropped, as verl's dataloader does).
        """
        size = int(batch_size or 1)
        n = len(self.data)
        left = (self.total_epochs - self.epoch) * n - self.index
        if left < size:
            raise EndOfData(f"data set read {self.total_epochs} time(s)")
        out = []
        for _ in range(size):
            out.append(self._format(self.index))
            self.index += 1
            if self.index == n:
                self.epoch, self.index = self.epoch + 1, 0
        return out

    async def read_async(self, batch_size: Optional[int] = None) -> list[Experience]:
        return self.read(batch_size)

    def steps_left(self, batch_size: int) -> int:
        return ((self.total_epochs - self.epoch) * len(self.data) - self.index) // batch_size

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch = int(state.get("epoch", 0))
        self.index = int(state.get("index", 0))


def build_trainer_readers(config: Config, schema: str, tokenizer: Any) -> dict[str, Any]:
    """``{"experience_buffer": reader, **auxiliary}`` for the trainer's sample strategy."""
    readers: dict[str, Any] = {}
    trainer_input = config.buffer.trainer_input
    buffers = {"experience_buffer": trainer_input.experience_buffer}
    buffers.update(trainer_input.auxiliary_buffers or {})
    for name, storage in buffers.items():
        if storage is None:
            continue
        raw_rows = name == "experience_buffer" and schema in DATASET_SCHEMAS
        raw_rows = raw_rows or (schema_of(storage) in DATASET_SCHEMAS)
        if raw_rows and storage.storage_type == "file":
            # an auxiliary data set (mix's expert rows) is read for its own total_epochs
            # (Trinity-RFT's per-storage setting; the config check derives it from
            # buffer.total_epochs when unset)
            epochs = config.buffer.total_epochs
            if name != "experience_buffer":
                epochs = storage.total_epochs
            readers[name] = DatasetExperienceReader(
                storage,
                schema if name == "experience_buffer" else schema_of(storage),
                tokenizer,
                total_epochs=epochs,
            )
        else:
            from trinity.buffer import get_buffer_reader

            readers[name] = get_buffer_reader(storage)
    return readers


def schema_of(storage: StorageConfig) -> Optional[str]:
    schema = getattr(storage, "schema_type", None)
    return str(schema).lower() if schema else None
