package proxy

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// toStatus is the one place where Tandem's error classes become gRPC codes. A status that came from the
// runtime is returned as it is, so kubelet sees the runtime's own code, message and details.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errdefs.IsDeadlineExceeded(err):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled), errdefs.IsCanceled(err):
		return codes.Canceled
	case errdefs.IsInvalidArgument(err):
		return codes.InvalidArgument
	case errdefs.IsNotFound(err):
		return codes.NotFound
	case errdefs.IsAlreadyExists(err):
		return codes.AlreadyExists
	case errdefs.IsFailedPrecondition(err), errdefs.IsConflict(err):
		return codes.FailedPrecondition
	case errdefs.IsResourceExhausted(err):
		return codes.ResourceExhausted
	case errdefs.IsUnavailable(err):
		return codes.Unavailable
	case errdefs.IsPermissionDenied(err):
		return codes.PermissionDenied
	case errdefs.IsUnauthorized(err):
		return codes.Unauthenticated
	case errdefs.IsNotImplemented(err):
		return codes.Unimplemented
	case errdefs.IsOutOfRange(err):
		return codes.OutOfRange
	case errdefs.IsAborted(err):
		return codes.Aborted
	case errdefs.IsDataLoss(err):
		return codes.DataLoss
	case errdefs.IsInternal(err):
		return codes.Internal
	default:
		return codes.Unknown
	}
}
