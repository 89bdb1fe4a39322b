"""Data schemas of the buffer (Trinity-RFT's ``trinity.buffer.schema``).

* :data:`FORMATTER`: the formatters turning SFT / DPO data set rows into experiences (the
  same registry as :data:`trinity.buffer.formatter.FORMATTERS`);
* :data:`SQL_SCHEMA`: row models of the SQL storage by schema name; ``experience`` is
  :class:`~trinity.buffer.schema.sql_schema.ExperienceModel`.
"""

from trinity.buffer.formatter import FORMATTERS
from trinity.buffer.schema.sql_schema import SQL_SCHEMA, ExperienceModel

#: Trinity-RFT's name of :data:`trinity.buffer.formatter.FORMATTERS`.
FORMATTER = FORMATTERS

__all__ = ["FORMATTER", "SQL_SCHEMA", "ExperienceModel"]
