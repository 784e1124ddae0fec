"""Free answers: API requests in the dataset's own labels and values → model queries → JSON.

Everything here is post-processing of the dataset's latest model (`app.services.models`):
it reads no records, draws no noise and never touches the ledger. Each function takes
a `LoadedModel` and returns plain JSON-ready values (lists via `ndarray.tolist()`), so
the routers can send them without re-validating large response models.

- `marginal_answer` — counts N̂·p over some attributes, one label tuple per cell
  (row-major), with the standard error the measurements covering them imply
  (AIM §5, Theorem 1's estimator) and a hook for the error bound (AIM Thms 2/4).
- `count_answer` — one number for `where=attr:v1,v2` / `where=attr:lo..hi` filters.
- `queries_answer` — a batch of factored queries (Private-PGM appendix B): `where`
  value sets or ranges, `by` value / cdf / groups, `weights`, `moments`.
- `quantiles_answer` — p-quantiles, MIN and MAX of one attribute from its one-way
  marginal, each with the bin it lies in (`parse_fractions`, `quantiles_size`).
- `synthetic_csv` — records sampled from the model, as CSV in the schema's labels.
- `sql_answer` — a SQL SELECT compiled by `app.sql` to factored queries (`read_sql`,
  `prepare_sql`, `prepare_text` (kept per model version), `answer_sql`; `sql_json`, and
  `sql_csv` for `Accept: text/csv`).

Each of marginals, counts and queries can also be checked and sized first
(`marginal_size`, `count_query` + `count_size`, `prepare_queries`: a `WorkSize`) and
computed afterwards, so the API can decide where to compute it. `visible_ready_model`
gives the version a request is answered from, loaded and calibrated; `ready_model`
says whether a version is in that state already (answering it then does no slow
first-use work).

One module per kind of answer — `marginals`, `counts` (with `values`, which turns
`where` filters into codes), `queries`, `synthetic` — beside `versions` (which
version answers, and GET /model) and `common` (limits, refusals, `WorkSize`); this
package gathers their public names, which is all the routers use.

Values are given as the schema admits them (`app.schema`): categorical values, numeric
bin labels such as "[18, 30)" or half-open ranges on bin edges, integer codes. Every
problem with a request is an `InvalidRequest` (422) naming the parameter or field.
"""

from app.limits import COUNT_DECIMALS
from app.services.answers.common import (
    MAX_INFERENCE_CELLS,
    MAX_MOMENT_ORDER,
    MAX_QUERIES_PER_REQUEST,
    MAX_SYNTHETIC_ROWS,
    SYNTHETIC_CHUNK_ROWS,
    QueryTooLarge,
    TooManyCells,
    WorkSize,
    untouched_note,
)
from app.services.answers.counts import (
    CountQuery,
    count_answer,
    count_query,
    count_result,
    count_size,
)
from app.services.answers.marginals import (
    StandardError,
    error_bound,
    marginal_answer,
    marginal_json,
    marginal_size,
    parse_attribute_list,
    standard_error,
)
from app.services.answers.quantiles import parse_fractions, quantiles_answer, quantiles_size
from app.services.answers.queries import (
    Grouping,
    PreparedBatch,
    PreparedQuery,
    QuerySpec,
    ValueRange,
    answer_prepared,
    build_query,
    prepare_queries,
    queries_answer,
)
from app.services.answers.sql import (
    PreparedSql,
    answer_sql,
    cached_table_names,
    prepare_sql,
    prepare_text,
    read_sql,
    resolve_dataset,
    sql_answer,
    sql_csv,
    sql_json,
    table_names,
)
from app.services.answers.synthetic import synthetic_csv, synthetic_rows
from app.services.answers.values import parse_where
from app.services.answers.versions import (
    load_ready_model,
    model_description,
    ready_model,
    visible_model,
    visible_ready_model,
)

__all__ = [
    "COUNT_DECIMALS",
    "MAX_INFERENCE_CELLS",
    "MAX_MOMENT_ORDER",
    "MAX_QUERIES_PER_REQUEST",
    "MAX_SYNTHETIC_ROWS",
    "SYNTHETIC_CHUNK_ROWS",
    "CountQuery",
    "Grouping",
    "PreparedBatch",
    "PreparedQuery",
    "PreparedSql",
    "QuerySpec",
    "QueryTooLarge",
    "StandardError",
    "TooManyCells",
    "ValueRange",
    "WorkSize",
    "answer_prepared",
    "answer_sql",
    "build_query",
    "cached_table_names",
    "count_answer",
    "count_query",
    "count_result",
    "count_size",
    "error_bound",
    "load_ready_model",
    "marginal_answer",
    "marginal_json",
    "marginal_size",
    "model_description",
    "parse_attribute_list",
    "parse_fractions",
    "parse_where",
    "prepare_queries",
    "prepare_sql",
    "prepare_text",
    "quantiles_answer",
    "quantiles_size",
    "queries_answer",
    "read_sql",
    "ready_model",
    "resolve_dataset",
    "sql_answer",
    "sql_csv",
    "sql_json",
    "standard_error",
    "synthetic_csv",
    "synthetic_rows",
    "table_names",
    "untouched_note",
    "visible_model",
    "visible_ready_model",
]
