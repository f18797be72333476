"""Going back in a destination's source topics by time: `connector backfill` re-offers a range
(`reoffer`), `connector rewind` moves a stopped connector's offsets (`rewind`).

Both find where a time falls in a partition (`positions`); a backfill reads what to re-offer
(`selection`), resumes from its checkpoint (`checkpoint`), and both show their tables and
progress (`views`). Nothing on the delivery path imports this package. Each name is imported
from the module that defines it (`connector.backfill.reoffer.Backfill`), so `connector rewind`
loads no pyarrow.
"""
