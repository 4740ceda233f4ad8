"""Engine errors as the API says them: a request that lost a race for the model (another
request switched it while this one was prepared) is a 409 the client can retry, not a 500."""

from __future__ import annotations

from wren.engine.errors import ModelNotFound, ModelNotLoaded, WrenError
from wren.engine.server.gate import error_for
from wren.engine.server.serving import ModelBusy


def test_losing_the_model_to_another_request_is_a_conflict():
    busy = error_for(ModelBusy("“a” is answering other requests"))
    switched = error_for(ModelNotLoaded("the model was unloaded while this answer was being prepared"))
    assert (busy.status, busy.code, busy.param) == (409, "model_busy", "model")
    assert (switched.status, switched.code, switched.param) == (409, "model_busy", "model")
    assert switched.message == ("the model was unloaded while this answer was being prepared: another request "
                                "loaded a different model; try again")
    assert error_for(ModelNotFound("no model named 'x'")).status == 404
    assert error_for(WrenError("the disk is full")).status == 500
