"""The pieces of one turn: the plan a Send is prepared into once (plan.py) and the small
steps its answer stream is stacked from (the other modules), shared by `engine.turns.Turns`
and the HTTP server's stateless answers."""
